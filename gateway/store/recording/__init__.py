"""The recorder: the worker-side consumer of the record stream that applies turns to
transcripts (one per shard in a cluster). Built by `gateway.wiring`; the request path only
enqueues (`gateway.store.redis_store`)."""

from gateway.store.recording.recorder import Recorder
from gateway.store.recording.sharded import ShardedRecorder

__all__ = ["Recorder", "ShardedRecorder"]
