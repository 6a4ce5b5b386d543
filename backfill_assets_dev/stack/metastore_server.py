"""A Hive metastore service (Thrift) on Postgres, bound to 127.0.0.1 only.

``python metastore_server.py --port P --jdbc-url URL
--jdbc-jar JAR --warehouse DIR`` serves the metastore of the pyspark wheel's Hive jars
until it is killed. ``HiveMetaStore -p`` binds every interface and has no bind-address
setting in Hive 2.3, so this builds the same Thrift server (handler, processor, thread
pool) through py4j, on a socket bound to 127.0.0.1. The schema must exist first
(DataNucleus SchemaTool, see ``servers.create_metastore_schema``).
"""

from __future__ import annotations

import argparse
import sys

HOST = "127.0.0.1"


def metastore_conf(jdbc_url: str, warehouse: str) -> dict[str, str]:
    return {
        "javax.jdo.option.ConnectionURL": jdbc_url,
        "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "javax.jdo.option.ConnectionUserName": "postgres",
        "javax.jdo.option.ConnectionPassword": "",
        "datanucleus.schema.autoCreateAll": "false",
        "datanucleus.autoCreateSchema": "false",
        "datanucleus.fixedDatastore": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": warehouse,
        "hive.async.log.enabled": "false",
        "datanucleus.connectionPoolingType": "HikariCP",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--jdbc-url", required=True)
    parser.add_argument("--jdbc-jar", required=True)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--classpath", default="", help="more jars (the S3A connector)")
    parser.add_argument("--hadoop", action="append", default=[], help="key=value (fs.s3a.*)")
    args = parser.parse_args(argv)

    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False)
    conf.set("spark.driver.extraClassPath", ":".join(filter(None, [args.jdbc_jar, args.classpath])))
    conf.set("spark.driver.extraJavaOptions", "-Dhive.async.log.enabled=false")
    gateway = launch_gateway(conf)
    jvm = gateway.jvm
    hive_conf = jvm.org.apache.hadoop.hive.conf.HiveConf()
    for key, value in metastore_conf(args.jdbc_url, args.warehouse).items():
        hive_conf.set(key, value)
    for setting in args.hadoop:
        key, _, value = setting.partition("=")
        hive_conf.set(key, value)
    metastore = jvm.org.apache.hadoop.hive.metastore
    handler = metastore.HiveMetaStore.newRetryingHMSHandler(
        "new db based metaserver", hive_conf, False
    )
    processor = metastore.TSetIpAddressProcessor(handler)
    thrift = jvm.org.apache.thrift
    server_socket = thrift.transport.TServerSocket(jvm.java.net.InetSocketAddress(HOST, args.port))
    server_args = (
        getattr(thrift.server, "TThreadPoolServer$Args")(server_socket)
        .processor(processor)
        .transportFactory(thrift.transport.TTransportFactory())
        .protocolFactory(getattr(thrift.protocol, "TBinaryProtocol$Factory")())
        .minWorkerThreads(4)
        .maxWorkerThreads(64)
    )
    server = thrift.server.TThreadPoolServer(server_args)
    print(f"metastore serving on {HOST}:{args.port}", flush=True)
    server.serve()  # blocks until the process is killed
    return 0


if __name__ == "__main__":
    sys.exit(main())
