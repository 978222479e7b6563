"""The vocabulary: the names every layer shares (scope and trace-file grammars, op and kernel
names, masks, backends). Imports nothing of ours."""
