"""`shardwise-download`: fill a model cache volume from the hub once, reporting progress."""
