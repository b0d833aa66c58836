"""Adapter versions: state in the shared store, operations, promotion gate, automatic rollback.

Update one specialist without touching the base: `load` a new version next to the old one on
every base-group replica, give it a `canary` share of new sessions, then `promote` or
`rollback`, and `unload` the old one once nothing uses it. Routers read the state on every
request (`VersionRuntime`), so every replica obeys a change at once.

Import from the submodules (`macaron.lifecycle.runtime`, `.operations`, ...): this package is
imported by the configuration (through `.settings`), which must stay light.
"""
