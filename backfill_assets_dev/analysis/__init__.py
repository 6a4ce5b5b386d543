"""Read-only analyses of the published tables that help an operator choose settings."""
