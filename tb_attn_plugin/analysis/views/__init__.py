"""One trace to the tab's views: the drill-down tree, the memory curve, the timeline."""
