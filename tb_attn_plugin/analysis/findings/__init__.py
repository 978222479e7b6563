"""The rules: what one trace's figures and ops say is wrong, and the order findings are listed in."""
