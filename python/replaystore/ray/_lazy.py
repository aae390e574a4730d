"""The shards of a buffer shaped like another library's (RLlib's, TorchRL's): started
by the first add, whose columns are their schema, or found by name when another
process started them."""

import replaystore as rs

from ._client import ShardedBuffer


class LazyShards:
    """Holds the shards' settings until the first add, then the client."""

    def _settings(self, *, name, root, capacity, alpha, eps, nodes, resources, prefetch):
        self.name, self.root, self.capacity = name, root, capacity
        self.alpha, self.eps = alpha, eps
        self._where = {"nodes": nodes, "resources": resources, "prefetch": prefetch}
        self._client = None

    def _schema(self, columns):
        """The shards' schema for an add of ``columns`` (the subclass's layout)."""
        raise NotImplementedError

    def _shards(self, columns=None):
        """The client: made now from ``columns`` (the first add), or found by name;
        ``EmptyError`` when there are neither."""
        if self._client is None:
            schema = None
            if columns is not None:
                if self.capacity is None:
                    raise ValueError("give capacity= (items per shard) to create the shards")
                schema = self._schema(columns)
            options = {"alpha": self.alpha, "eps": self.eps} if self.alpha is not None else {}
            try:
                self._client = ShardedBuffer.open_or_create(
                    self.name, schema, self.capacity, root=self.root, **self._where, **options)
            except rs.NotABufferError:
                raise rs.EmptyError(f"{self.name!r}: nothing added yet") from None
        return self._client
