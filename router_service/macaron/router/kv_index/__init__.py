"""Engine truth for placement: which KV-cache blocks each replica really holds, per adapter.

`keys` names a block the same way on the request side and the event side; `index` applies an
engine's KV-cache events to the shared store (and reads them back for placement); `subscriber`
follows every replica's ZeroMQ publisher; `settings` holds the knobs.
"""

from macaron.router.kv_index.index import KVIndexWriter, matched_depths
from macaron.router.kv_index.keys import block_keys_of_tokens, lora_seed

__all__ = ["KVIndexWriter", "block_keys_of_tokens", "lora_seed", "matched_depths"]
