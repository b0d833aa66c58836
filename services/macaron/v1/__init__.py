"""Generated from protos/macaron/v1 by `scripts/generate`; do not edit."""
