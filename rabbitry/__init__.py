"""Layer 4: node boot from config, the CLI, the control API, Spark embedding and testing helpers."""
