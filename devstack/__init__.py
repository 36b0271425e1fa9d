"""The local stack for development, tests, benchmarks and the soak; never installed.

``localaws`` (moto's server, serialised, for SQS, DynamoDB and S3), ``fault_proxy`` (injected
outages), ``stack`` (the process supervisor) and ``demo`` (``make run``).
"""
