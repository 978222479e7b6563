"""One trace's figures: traffic, generation, sparsity, peaks and roofline, heads, the headline."""
