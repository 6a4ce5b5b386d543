"""Spark itself: the session with the project's configuration, the checks made before a JVM starts,
the class-data archive that starts it faster."""
