"""What-if: the configuration panel, the background runner, scenarios and their comparison."""
