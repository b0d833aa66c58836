"""The Ray Serve shape: the same components as Serve deployments (`macaron ray`, `macaron.rayserve.app:build`).

- `settings.py`: the `ray:` configuration section (cluster, ingress, replicas and autoscaling per deployment)
- `relay.py`: gRPC between deployments over Serve handles, same protobuf bytes
- `directory.py`: where the engine replicas are (router placement needs their URLs)
- `deployments.py`: the deployments, thin wrappers of the same classes `macaron serve` runs
- `app.py`: the application graph; `build` for `serve run` / Serve config files
- `cli.py`: `macaron ray`

Importing this package stays light: Ray is imported by the modules that need it.
"""
