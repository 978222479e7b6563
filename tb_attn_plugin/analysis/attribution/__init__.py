"""Who owns each event: layer, head, phase, step, backward, and the shared questions over them."""
