"""A local S3 for the tests: moto's server in a thread of this process, on 127.0.0.1 (it ends with the
process, or when the session fixture stops it). Credentials are fake; moto checks none unless auth()."""

from __future__ import annotations

import contextlib
import logging
import urllib.request
import uuid
from typing import Iterator, List

REGION = "us-east-1"
FAKE_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true"}
UNSET_ENV = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
             "AWS_SHARED_CREDENTIALS_FILE")


class LocalS3:
    def __init__(self):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.hostport, self.endpoint = f"{host}:{port}", f"http://{host}:{port}"

    def stop(self) -> None:
        self.server.stop()

    def _client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION)

    def bucket(self) -> str:
        """A new empty bucket."""
        name = f"detrun-{uuid.uuid4().hex[:12]}"
        self._client().create_bucket(Bucket=name)
        return name

    def uri(self, bucket: str, prefix: str = "runs") -> str:
        """The runs root s3://bucket/prefix, with this server as the endpoint in the URI's query."""
        return f"s3://{bucket}/{prefix}?endpoint_override={self.hostport}&scheme=http&region={REGION}"

    def keys(self, bucket: str) -> List[str]:
        pages = self._client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def delete(self, bucket: str, key: str) -> None:
        """Delete one object, as `aws s3 rm` would (pyarrow's delete_file leaves a folder marker)."""
        self._client().delete_object(Bucket=bucket, Key=key)

    def _auth_after(self, count: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=count.encode(),
                                         method="POST", headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10):
            pass

    @contextlib.contextmanager
    def auth(self) -> Iterator[None]:
        """Within the block the server checks every request's credentials (no IAM user exists, so any
        key is refused: wrong credentials)."""
        self._auth_after("0")
        try:
            yield
        finally:
            self._auth_after("inf")
