"""A command's stdin and output carried through ConfigMaps, between the bridge and the pod.

`<pod>-in` is written by the bridge only: `stdin` (everything written so far) and `closed`.
`<pod>-out-<n>` are written by the pod only: `stdout`, `stderr` (everything of that chunk so far),
`sealed` (the next chunk has begun) and, in the last chunk, `exit`. A chunk holds at most
CHUNK_BYTES, well under a ConfigMap's 1 MiB. One writer per object: no update conflicts.
"""

from __future__ import annotations

from typing import IO, Any

from preflight.integrations.kubernetes.api import MERGE, api_error

CHUNK_BYTES = 512 * 1024


class Channel:
    def __init__(self, api: Any, namespace: str, pod: str, labels: dict[str, str],
                 owner: dict[str, Any] | None = None) -> None:
        self.api, self.ns, self.labels, self.owner = api, namespace, labels, owner
        self.in_name = f"{pod}-in"
        self.out_prefix = f"{pod}-out"

    def _body(self, name: str, data: dict[str, str]) -> dict[str, Any]:
        owners = {"ownerReferences": [self.owner]} if self.owner else {}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": self.labels, **owners},
                "data": data}

    def create_input(self) -> None:
        try:
            self.api.create_namespaced_config_map(self.ns, self._body(self.in_name, {"stdin": "", "closed": "0"}))
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"creating ConfigMap {self.in_name} in {self.ns}") from None

    def adopt_input_metadata(self) -> None:
        """Take the input ConfigMap's labels and owner for the output ones (the pod's side): the run's
        labels, its deadline and its record, so that whatever removes the run's objects finds these too."""
        try:
            meta = self.api.read_namespaced_config_map(self.in_name, self.ns).metadata
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"reading ConfigMap {self.in_name}") from None
        self.labels = dict(meta.labels or {})
        owners = list(meta.owner_references or [])
        self.owner = {"apiVersion": owners[0].api_version, "kind": owners[0].kind, "name": owners[0].name,
                      "uid": owners[0].uid, "blockOwnerDeletion": False} if owners else None

    def write_input(self, text: str, closed: bool) -> None:
        try:
            self.api.patch_namespaced_config_map(self.in_name, self.ns,
                                                 {"data": {"stdin": text, "closed": "1" if closed else "0"}}, _content_type=MERGE)
        except Exception:  # noqa: BLE001,S110 - the pod may be gone already; the bridge sees that
            pass

    def read_input(self) -> dict[str, str] | None:
        try:
            return dict(self.api.read_namespaced_config_map(self.in_name, self.ns).data or {})
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", None) == 404:
                return None
            raise api_error(exc, f"reading ConfigMap {self.in_name}") from None

    def out_name(self, index: int) -> str:
        return f"{self.out_prefix}-{index}"

    def write_output(self, index: int, data: dict[str, str], create: bool) -> None:
        name = self.out_name(index)
        try:
            if create:
                self.api.create_namespaced_config_map(self.ns, self._body(name, data))
            else:
                self.api.patch_namespaced_config_map(name, self.ns, {"data": data}, _content_type=MERGE)
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"writing ConfigMap {name}") from None

    def read_output_chunk(self, index: int) -> dict[str, str] | None:
        try:
            return dict(self.api.read_namespaced_config_map(self.out_name(index), self.ns).data or {})
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", None) == 404:
                return None
            raise api_error(exc, f"reading ConfigMap {self.out_name(index)}") from None

    def delete_all(self) -> None:
        selector = ",".join(f"{k}={v}" for k, v in self.labels.items())
        try:
            self.api.delete_collection_namespaced_config_map(self.ns, label_selector=selector)
        except Exception:  # noqa: BLE001,S110 - the run's end sweeps what is left
            pass


def read_output(channel: Channel, offsets: dict[str, int], stdout: IO[str], stderr: IO[str]) -> int | None:
    """Print what the pod wrote since the last call; its command's exit code once it has one."""
    index = offsets.get("chunk", 0)
    while True:
        data = channel.read_output_chunk(index)
        if data is None:
            return None
        for key, stream in (("stdout", stdout), ("stderr", stderr)):
            text = data.get(key, "")
            seen = offsets.get(f"{index}:{key}", 0)
            if len(text) > seen:
                stream.write(text[seen:])
                stream.flush()
                offsets[f"{index}:{key}"] = len(text)
        if "exit" in data:
            return int(data["exit"])
        if data.get("sealed") != "1":
            return None
        index += 1
        offsets["chunk"] = index
