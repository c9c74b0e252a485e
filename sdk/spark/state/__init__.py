"""What both sides keep between micro-batches: the checkpointed engine state, its format and
store (local or object storage), the lease that lets one sync hold a checkpoint, and the
record a head start leaves for the stream to take up.
"""
