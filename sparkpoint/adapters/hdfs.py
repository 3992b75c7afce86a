"""HDFS, reached through the NameNode's WebHDFS REST API with fsspec's client, made to do what sparkpoint's
storage needs of every file system.

Why WebHDFS rather than pyarrow's HDFS: pyarrow's needs libhdfs, a JVM and a Hadoop installation's CLASSPATH on
the operator's machine; WebHDFS is HTTP to the NameNode and DataNodes, which a cluster enables by default, and
needs nothing installed. pyarrow's is refused in one line (``storage_for``). A Kerberos-secured cluster (SPNEGO)
is not reached.

What HDFS does differently from a local disk, and how each is met here (the one place that names them):

- **No hard links.** A restore into HDFS copies the savepoint's files (a remote ``Storage`` has no
  ``same_device``); the savepoint itself is only read.
- **A rename onto an existing directory moves the source into it**, and onto an existing file fails without an
  error (WebHDFS answers ``{"boolean": false}``, which fsspec ignores). ``mv`` here renames with
  ``renameoptions=NONE`` (HDFS's rename2), which refuses any existing target: two restores racing for one
  target end with one whole directory and one FileExistsError, never one inside the other.
- **A file is visible, growing, while it is written**, and fsspec's upload creates it empty and then appends.
  ``pipe_file`` (Storage.write_atomic, the manifest) writes a temporary name and renames it over the target
  (``renameoptions=OVERWRITE``): a reader sees the old file or the whole new one.
- **No O_EXCL open**, but a create with ``overwrite=false`` is refused on an existing file, atomically in the
  NameNode: every upload here is such a create, so a file is never written through.
"""

from __future__ import annotations

import errno
import getpass
import os
import secrets
from typing import Any
from urllib.parse import quote, urlsplit

from fsspec.implementations.webhdfs import WebHDFile, WebHDFS

from sparkpoint import json_input
from sparkpoint.adapters.hadoop_conf import conf_dirs, read_site
from sparkpoint.errors import ConfigError

NAMENODE_HTTP_PORT = "9870"  # Hadoop 3's default (dfs.namenode.http-address)
# WebHDFS's RemoteException names, as the OSErrors a Storage caller handles.
_ERRORS = {"FileNotFoundException": errno.ENOENT, "FileAlreadyExistsException": errno.EEXIST,
           "AccessControlException": errno.EACCES, "SecurityException": errno.EACCES,
           "ParentNotDirectoryException": errno.ENOTDIR, "PathIsNotEmptyDirectoryException": errno.ENOTEMPTY}


_WILDCARDS = ("0.0.0.0", "")


def namenode_addresses(authority: str, options: dict[str, Any]) -> list[str]:
    """The WebHDFS addresses (host:port) of the NameNode(s) behind ``hdfs://authority``: ``webhdfs`` of the
    storage options (``storage_options: {hdfs: {webhdfs: HOST:PORT}}``), else hdfs-site.xml in HADOOP_CONF_DIR
    (``dfs.namenode.http-address``, each NameNode of an HA nameservice), else the RPC host on the default port."""
    if options.get("webhdfs"):
        return [str(options["webhdfs"])]
    host = authority.rsplit(":", 1)[0]
    directories = conf_dirs()
    site = read_site(directories[0], "hdfs-site.xml") if directories else {}
    namenodes = [n.strip() for n in site.get(f"dfs.ha.namenodes.{host}", "").split(",") if n.strip()]
    if namenodes:
        found = []
        for namenode in namenodes:
            http_host, _, http_port = site.get(f"dfs.namenode.http-address.{host}.{namenode}", "").rpartition(":")
            rpc_host = site.get(f"dfs.namenode.rpc-address.{host}.{namenode}", "").rpartition(":")[0]
            if not http_port.isdigit():
                continue
            if http_host in _WILDCARDS:  # every interface of that NameNode's host: its RPC address's
                http_host = rpc_host if rpc_host not in _WILDCARDS else "127.0.0.1"
            found.append(f"{http_host}:{http_port}")
        return found
    configured_host, _, configured_port = site.get("dfs.namenode.http-address", "").rpartition(":")
    if configured_host in _WILDCARDS and configured_port.isdigit():  # every interface of the NameNode's host
        return [f"{host}:{configured_port}"]
    loopback = ("localhost", "127.0.0.1")
    if configured_port.isdigit() and (configured_host == host or (configured_host in loopback and host in loopback)):
        return [f"{configured_host}:{configured_port}"]
    return [f"{host}:{NAMENODE_HTTP_PORT}"]  # the file is another cluster's


def filesystem(url: str, options: dict[str, Any]) -> SafeWebHdfs:
    """The file system of an ``hdfs://`` URL: the first of its NameNodes that answers (an HA pair's standby
    refuses reads and writes with a StandbyException)."""
    authority = urlsplit(url).netloc
    if not authority:
        raise ConfigError(f"{url}: an hdfs:// URL names its NameNode (hdfs://HOST:PORT/path or hdfs://NAMESERVICE/)")
    user = str(options.get("user") or os.environ.get("HADOOP_USER_NAME") or getpass.getuser())
    addresses = namenode_addresses(authority, options)
    last: OSError | None = None
    for address in addresses:
        host, _, port = address.rpartition(":")
        fs = SafeWebHdfs(host=host, port=int(port), user=user, use_https=bool(options.get("https")),
                         skip_instance_cache=True)
        if len(addresses) == 1:
            return fs
        try:
            fs.info("/")
            return fs
        except OSError as exc:
            last = exc
    raise OSError(f"no NameNode of {authority} answers ({', '.join(addresses)}): {last}")


class SafeWebHdfs(WebHDFS):
    protocol = ("hdfs", "webhdfs")

    @classmethod
    def _strip_protocol(cls, path):
        """The path of an hdfs:// or webhdfs:// URL as Hadoop reads it, '?' and '#' included (a query named 'a?b'
        checkpoints to '<root>/a?b'); fsspec's own parses a URL and would cut it there, at another path."""
        if isinstance(path, list):
            return [cls._strip_protocol(each) for each in path]
        scheme, separator, rest = path.partition("://")
        if not separator or scheme not in cls.protocol:
            return path
        authority_end = rest.find("/")
        return rest[authority_end:] if authority_end >= 0 else ""

    def _connect(self) -> None:
        super()._connect()
        # As sparkpoint's own HTTP (adapters.http): never through a proxy the environment names.
        self.session.trust_env = False

    def _call(self, op, method="get", path=None, data=None, redirect=True, **kwargs):
        """fsspec's call, with HDFS's exceptions as the OSErrors they are (fsspec makes most a RuntimeError)."""
        url = self._apply_proxy(self.url + quote(self._strip_protocol(path) if path is not None else "", safe="/="))
        answer = self.session.request(method=method.upper(), url=url, params={**kwargs, **self.pars,
                                                                             "op": op.upper()},
                                      data=data, allow_redirects=redirect)
        _raise_remote(answer, path)
        return answer

    def _open(self, path, mode="rb", block_size=None, autocommit=True, replication=None, permissions=None,
              **kwargs):
        if "a" in mode:
            raise ValueError("sparkpoint never appends to a file on HDFS")
        return ExclusiveFile(self, path, mode=mode, block_size=block_size or self.blocksize, tempdir=self.tempdir,
                             autocommit=autocommit, replication=replication, permissions=permissions)

    def mv(self, path1, path2, **kwargs) -> None:
        self._rename(path1, path2, "NONE")

    def _rename(self, source: str, target: str, option: str) -> None:
        target_path = self._strip_protocol(target)
        parent = target_path.rsplit("/", 1)[0] or "/"
        self._call("MKDIRS", method="put", path=parent)
        self._call("RENAME", method="put", path=source, destination=target_path, renameoptions=option)

    def pipe_file(self, path, value, mode="overwrite", **kwargs) -> None:
        path = self._strip_protocol(path)
        parent, _, name = path.rpartition("/")
        temporary = f"{parent}/.{name}.{secrets.token_hex(8)}.tmp"
        with self.open(temporary, "wb") as out:
            out.write(value)
        try:
            self._rename(temporary, path, "NONE" if mode == "create" else "OVERWRITE")
        except BaseException:
            self.rm(temporary)
            raise


class ExclusiveFile(WebHDFile):
    """An upload that is refused if the file exists: its first chunk is a CREATE with overwrite=false (one
    request to the NameNode, one with the data to a DataNode), the next ones appends."""

    def _initiate_upload(self) -> None:
        self.location = None

    def _upload_chunk(self, final: bool = False) -> bool:
        data = self.buffer.getvalue()
        if self.location is None:
            created = self.fs._call("CREATE", "put", self.path, redirect=False, overwrite="false",
                                    permission=oct(self.permissions)[2:])
            answer = self.fs.session.put(self.fs._apply_proxy(created.headers["Location"]), data=data,
                                         headers={"content-type": "application/octet-stream"})
            _raise_remote(answer, self.path)
            if not final:
                appending = self.fs._call("APPEND", "post", self.path, redirect=False)
                self.location = self.fs._apply_proxy(appending.headers["Location"])
            return True
        answer = self.fs.session.post(self.location, data=data, headers={"content-type": "application/octet-stream"})
        _raise_remote(answer, self.path)
        return True


def _raise_remote(answer, path: str | None) -> None:
    """An error status of the NameNode or a DataNode as the OSError it names (the RemoteException's class)."""
    if answer.status_code < 400:
        return
    try:
        remote = json_input.loads(answer.content)["RemoteException"]
        name, message = remote.get("exception", ""), str(remote.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        name, message = "", answer.text[:200]
    message = message.splitlines()[0] if message.strip() else name  # a DataNode's message carries a stack trace
    if name in _ERRORS:
        raise OSError(_ERRORS[name], message, path)  # as the subclass the errno names: FileExistsError, ...
    raise OSError(f"HDFS answered {answer.status_code} ({name or 'no exception named'}): {message}")
