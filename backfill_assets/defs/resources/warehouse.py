"""The warehouse as assets and checks see it: the run's Spark session and the data location."""

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import SparkSession


class Warehouse(dg.ConfigurableResource):
    """Spark (one session per run process) plus where the tables' files live."""

    pyspark: dg.ResourceDependency[LazyPySparkResource]
    warehouse_dir: str

    @property
    def spark(self) -> SparkSession:
        return self.pyspark.spark_session
