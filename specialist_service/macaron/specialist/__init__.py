"""The specialist pools: one gRPC service per profile (chat, agent, code, ui) over the shared base.

Layout, one job per module:
- `settings.py`: profiles, discovery, limits (part of `MacaronSettings.specialists`)
- `profiles.py`: a profile at run time (settings + tool-call parser + output schema)
- `sampling.py`, `constraints.py`: request sampling → engine sampling; output constraints
- `tool_parsers.py`, `ui_schema.py` (+ `ui_schema.json`, the UI description v1): post-processing;
  A2UI output (grammar, SDK validation) lives in `macaron.a2ui`
- `replicas.py`: least-loaded replica choice among discovered ones; hint checking
- `generation.py`: the request pipeline (render, check, call the engine, post-process)
- `finish.py`, `errors.py`: finish reasons (OpenAI ↔ SGLang); domain errors
- `wire.py`, `servicer.py`, `server.py`, `cli.py`: protobuf ↔ domain; thin servicer; gRPC server
  with health, reflection and SIGTERM drain; `macaron specialist --name NAME`
Only the last four import protobuf or grpc.
"""
