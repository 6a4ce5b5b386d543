"""The asset checks (pandera rules, reconciliations) that block publication, per hour."""
