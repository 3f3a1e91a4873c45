"""Frame-stack storage: transitions whose observations are stacks of frames, every frame
kept once (optionally LZ4-compressed), and frames' wire payloads."""
