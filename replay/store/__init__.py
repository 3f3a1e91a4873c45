"""The in-memory prioritized store, no sockets: specs, ring storage, the sum-tree, the
prioritized store over them, and their snapshots on disk."""
