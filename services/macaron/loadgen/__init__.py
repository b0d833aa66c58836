"""Load generator of Macaron Serve: multi-turn sessions against the gateway (REST) or the router (gRPC).

    from macaron.loadgen import LoadConfig, run_load
    report = await run_load(LoadConfig(target="http://127.0.0.1:8080", rate=5, duration_s=30))
    print(report.table())

The library is what `macaron loadtest` and the fault suite use; it only ever talks to loopback.
"""

from macaron.loadgen.config import LoadConfig, LoopbackOnlyError
from macaron.loadgen.report import LoadReport, RequestResult
from macaron.loadgen.runner import run_load
from macaron.loadgen.workload import Session, Workload

__all__ = ["LoadConfig", "LoadReport", "LoopbackOnlyError", "RequestResult", "Session", "Workload", "run_load"]
