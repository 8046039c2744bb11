"""`rabbitry pipeline run` as a spark-submit application: the master and the conf are
spark-submit's (this file sets neither), the arguments are `rabbitry pipeline run`'s.

    spark-submit --master spark://HOST:7077 --conf spark.dynamicAllocation.enabled=true ... \\
        "$(python -c 'import rabbitry.pipeline.submit as s; print(s.__file__)')" \\
        --input msgs.jsonl --output out.parquet --node-config spark-node.yaml \\
        --join a@10.0.0.1=10.0.0.1:7001 --master-file /var/run/rabbitry/redis-master --json

spark-submit runs a Python application as a file, not a module, hence this file.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # Run as a file, this directory is sys.path[0]; rabbitry itself must come from the
    # installed package (or PYTHONPATH), not from here.
    del sys.path[0]
    from rabbitry.cli import main

    raise SystemExit(main(["pipeline", "run", *sys.argv[1:]]))
