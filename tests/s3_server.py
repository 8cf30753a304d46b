"""A real S3 server for the object-store tests: moto's standalone server (the server zarr-python,
s3fs and obstore test against), started as its own process on 127.0.0.1 from its own venv
(``.venv-moto``, made by tests/run: moto pins a botocore that s3fs's aiobotocore refuses), with
authentication on: an IAM user and access key are made in the first requests, and every later
request is checked against them (so wrong credentials are refused as by a real server)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MOTO = Path(os.environ.get("ZARRMILL_MOTO_PYTHON", REPO / ".venv-moto" / "bin" / "python"))
SETUP = """
import json, sys, boto3
iam = boto3.client("iam", endpoint_url=sys.argv[1], region_name="us-east-1",
                   aws_access_key_id="setup", aws_secret_access_key="setup")
iam.create_user(UserName="zarrmill-tests")
iam.put_user_policy(UserName="zarrmill-tests", PolicyName="all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
key = iam.create_access_key(UserName="zarrmill-tests")["AccessKey"]
print(json.dumps({"key": key["AccessKeyId"], "secret": key["SecretAccessKey"]}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    port: int = field(default_factory=free_port)
    key: str = ""
    secret: str = ""
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log: Path) -> "S3Server":
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"}  # the three IAM calls of SETUP
        self.process = subprocess.Popen([str(MOTO.parent / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"moto server did not start on {self.endpoint}: see {log}") from None
                time.sleep(0.2)
        done = subprocess.run([str(MOTO), "-c", SETUP, self.endpoint], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"moto IAM setup failed: {done.stderr[-2000:]}")
        creds = json.loads(done.stdout.strip().splitlines()[-1])
        self.key, self.secret = creds["key"], creds["secret"]
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def env(self, **override: str) -> dict[str, str]:
        """The variables every S3 client reads (zarrmill takes nothing else)."""
        out = {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ACCESS_KEY_ID": self.key,
               "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": "us-east-1"}
        out.update(override)
        return out

    def fs(self):
        import s3fs

        return s3fs.S3FileSystem(key=self.key, secret=self.secret, skip_instance_cache=True,
                                 client_kwargs={"endpoint_url": self.endpoint, "region_name": "us-east-1"})

    def make_bucket(self, name: str) -> str:
        self.fs().call_s3("create_bucket", Bucket=name)
        return name

    def keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix``, listed only (objects may come and go while a run writes)."""
        fs = self.fs()
        try:
            return fs.find(prefix.rstrip("/") + "/")
        except FileNotFoundError:
            return []

    def objects(self, prefix: str) -> dict[str, bytes]:
        """{key relative to prefix: bytes} of every object under ``prefix`` (``bucket/path``)."""
        fs = self.fs()
        fs.invalidate_cache()
        try:
            keys = fs.find(prefix.rstrip("/") + "/")
        except FileNotFoundError:
            return {}
        return {k[len(prefix.rstrip("/")) + 1:]: fs.cat_file(k) for k in keys}
