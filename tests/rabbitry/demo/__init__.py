"""Tests of the demo's building blocks (rabbitry/demo)."""
