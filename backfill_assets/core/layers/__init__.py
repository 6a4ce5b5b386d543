"""The layers' Spark work and quality rules: parsing, de-duplication, URLs, sessions."""
