"""The exactly-once dedup pipeline on Spark (docs/pipeline.md).

    run_pipeline(spark, input, output, PipelineOptions(...)) -> PipelineSummary
    check_paths(input, output)    the checks done before Spark starts

The job is ordinary RDD/DataFrame code; the cluster logic (claims, pauses, revoked ids) is in
rabbitry.spark.
"""

from rabbitry.pipeline.inputs import PipelineInputError, check_paths, rejects_path
from rabbitry.pipeline.job import PipelineOptions, PipelineSummary, run_pipeline

__all__ = [
    "PipelineInputError",
    "PipelineOptions",
    "PipelineSummary",
    "check_paths",
    "rejects_path",
    "run_pipeline",
]
