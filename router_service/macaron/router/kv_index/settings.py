"""Knobs of the KV-cache index (`router.kv_events`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class KVIndexSettings(BaseModel):
    """Placement on what the engines really cache: their KV-cache events, indexed in the placement store."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        True,
        description="Follow the KV-cache events of every replica that publishes them (SGLang `--kv-events-config`, "
        "the embedded engine's `kv_events_config`); replicas that publish none use the approximate prefix index.",
    )
    endpoint: str = Field(
        "",
        description="A replica's publisher as a template, e.g. `tcp://{host}:5557` ({host} is the replica URL's "
        "host); empty: read from the replica's /get_server_info (`kv_events_endpoint`, else the endpoint of its "
        "`kv_events_config`, a wildcard host replaced by the replica's).",
    )
    replay_endpoint: str = Field(
        "",
        description="A replica's replay socket (SGLang's `replay_endpoint`, a ZeroMQ ROUTER) as a template, e.g. "
        "`tcp://{host}:5558`; empty: read from the replica's /get_server_info (`kv_events_replay_endpoint`, else the "
        "`replay_endpoint` of its `kv_events_config`). When the sequence skips, the missed batches are asked for "
        "there and applied in order; without one, or when they are no longer buffered, what the index knew of that "
        "replica is dropped (a new epoch).",
    )
    topic: str = Field("", description="Topic to subscribe to (the publishers' `topic`).")
    block_size: int = Field(
        16,
        description="Tokens per KV-cache block of the engines (SGLang `--page-size`, the embedded engine's "
        "kv_block_size); events with another block size are not indexed.",
    )
    max_blocks: int = Field(512, description="Most blocks of a prompt looked up in the index (its head).")
    entry_ttl_s: float = Field(
        3600.0,
        description="Seconds a stored block stays indexed without being stored again: a guard against a removal "
        "event that never arrived (a restart or a gap in the sequence drops everything at once anyway).",
    )
    refresh_s: float = Field(
        5.0, description="How often replicas, their publishers and their start times are read again."
    )
    timeout_s: float = Field(2.0, description="Deadline of each /get_server_info call.")
