"""A real S3-compatible server for the tests and benchmarks: moto's, on 127.0.0.1, enforcing credentials.

Moto checks signatures once its first INITIAL_NO_AUTH_ACTION_COUNT requests are spent: those create
the user, its access key and policy, and the bucket; every later request needs that key.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from sparkpoint.times import poll_until

BUCKET = "sparkpoint-tests"
_SETUP_ACTIONS = 4


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Server:
    """``check_credentials=False``: for AWS SDK v1 (Hadoop 3.3's s3a), whose signatures moto cannot check: it
    recomputes them with botocore, which never signs User-Agent, and SDK v1 does (seen: SignatureDoesNotMatch)."""

    def __init__(self, log: Path, check_credentials: bool = True):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        server = Path(sys.executable).with_name("moto_server")
        with open(log, "ab") as output:
            self.process = subprocess.Popen(
                [str(server), "-H", "127.0.0.1", "-p", str(self.port)], stdout=output, stderr=subprocess.STDOUT,
                env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(_SETUP_ACTIONS if check_credentials else 10**9)))
        self._await_port()
        self.env = self._set_up()

    def _await_port(self, timeout: float = 30.0) -> None:
        def listening() -> bool:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return True
            if self.process.poll() is not None:
                raise RuntimeError("moto_server exited at start")
            return False

        if not poll_until(listening, timeout, 0.1):
            raise RuntimeError(f"moto_server did not listen on {self.port}")

    def _set_up(self) -> dict[str, str]:
        import boto3

        anonymous = {"endpoint_url": self.url, "region_name": "us-east-1", "aws_access_key_id": "setup",
                     "aws_secret_access_key": "setup"}
        iam = boto3.client("iam", **anonymous)
        iam.create_user(UserName="sparkpoint")
        key = iam.create_access_key(UserName="sparkpoint")["AccessKey"]
        iam.put_user_policy(UserName="sparkpoint", PolicyName="all", PolicyDocument=(
            '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}'))
        boto3.client("s3", **anonymous).create_bucket(Bucket=BUCKET)
        return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
                "AWS_ENDPOINT_URL": self.url, "AWS_DEFAULT_REGION": "us-east-1"}

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
