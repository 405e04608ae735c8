"""The wire protocols: each folder parses its bodies and encodes its answers."""
