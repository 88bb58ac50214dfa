"""checkpoint.roundtrip: storage speed, state round trip, formats, resume after a kill, TensorFlow."""
