"""The Redis layer: the store, its Lua scripts, the record codec, key names and topology.

Not for users: :class:`actors.Store` is re-exported at the top level.
"""
