"""Upload a model folder (``ofa export --out DIR``) to the Hugging Face Hub with ``huggingface_hub``.

The folder is checked first (weights, timm config and a card that parses), so a half-made folder is
never published; no token, no network and a refused upload are each one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ofa.export.model_folder import FOLDER_CARD, HUB_MISSING
from ofa.families.subnet_file import FOLDER_CONFIG, FOLDER_WEIGHTS
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label
from ofa.utils.io import read_json

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
LOGIN_HINT = "log in with `hf auth login` or set HF_TOKEN (a token with write access)"


class HubClient(Protocol):
    """The two calls of ``huggingface_hub.HfApi`` a push makes (tests pass a local stand-in)."""

    def create_repo(self, repo_id: str, *, private: bool, exist_ok: bool, repo_type: str) -> Any: ...

    def upload_folder(
        self, *, repo_id: str, folder_path: str, commit_message: str, revision: str | None, repo_type: str
    ) -> Any: ...


@dataclass(frozen=True)
class PushConfig:
    """Which folder goes to which Hub repo (``ofa push``'s options); checked once."""

    folder: Path
    repo_id: str = field(metadata={"metavar": "OWNER/NAME", "help": "Hub model repo to upload to"})
    private: bool = field(default=False, metadata={"help": "create the repo private (when it does not exist)"})
    revision: str | None = field(
        default=None, metadata={"metavar": "BRANCH", "help": "branch to commit to (default: main)"}
    )
    message: str = field(
        default="Upload a once-for-all subnet exported by `ofa export`", metadata={"help": "commit message"}
    )
    endpoint: str | None = field(
        default=None, metadata={"metavar": "URL", "help": "Hub endpoint (default: huggingface_hub's, HF_ENDPOINT)"}
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", Path(self.folder))
        if not REPO_ID.fullmatch(self.repo_id or ""):
            raise OFAError(
                f"{field_label(PushConfig, 'repo_id')} {self.repo_id!r}: expected OWNER/NAME (e.g. me/ofa-digits-3ms)"
            )
        check_folder(self.folder)


@dataclass(frozen=True)
class PushResult:
    """Where the folder went."""

    repo_id: str
    url: str
    commit: str | None


def check_folder(folder: Path) -> None:
    """A model folder as ``ofa export`` writes it, with a card that ``huggingface_hub`` parses; else `OFAError`."""
    if not folder.is_dir():
        raise OFAError(f"{folder}: not a folder (give the model folder written by `ofa export --out DIR`)")
    for name in (FOLDER_WEIGHTS, FOLDER_CONFIG, FOLDER_CARD):
        if not (folder / name).is_file():
            raise OFAError(f"{folder}: no {name}; not a model folder written by `ofa export --out DIR`")
    if "architecture" not in read_json(folder / FOLDER_CONFIG, "model folder config"):
        raise OFAError(f"{folder / FOLDER_CONFIG}: no 'architecture' field; not a timm model config")
    try:
        from huggingface_hub import ModelCard
    except ImportError:
        raise OFAError(HUB_MISSING) from None
    try:
        ModelCard.load(folder / FOLDER_CARD)
    except ValueError as exc:
        raise OFAError(f"{folder / FOLDER_CARD}: not a valid Hub model card: {str(exc).splitlines()[0]}") from None


def push_folder(cfg: PushConfig, client: HubClient | None = None) -> PushResult:
    """Create the repo if needed and upload the folder as one commit; `OFAError` when offline, not logged in,
    or refused by the Hub."""
    client = client if client is not None else _hub_client(cfg.endpoint)
    try:
        repo = client.create_repo(cfg.repo_id, private=cfg.private, exist_ok=True, repo_type="model")
        commit = client.upload_folder(
            repo_id=cfg.repo_id,
            folder_path=str(cfg.folder),
            commit_message=cfg.message,
            revision=cfg.revision,
            repo_type="model",
        )
    except Exception as exc:  # huggingface_hub raises its own HTTP errors and the HTTP client's transport errors
        raise OFAError(_explain(exc, cfg)) from None
    return PushResult(cfg.repo_id, str(getattr(repo, "url", repo)), getattr(commit, "oid", None))


def _hub_client(endpoint: str | None) -> HubClient:
    try:
        from huggingface_hub import HfApi, get_token
    except ImportError:
        raise OFAError(HUB_MISSING) from None
    if get_token() is None:
        raise OFAError(f"not logged in to the Hugging Face Hub: {LOGIN_HINT}")
    return HfApi(endpoint=endpoint)


def _explain(exc: Exception, cfg: PushConfig) -> str:
    """One line for a failed push: offline, refused credentials, or what the Hub said."""
    names = {c.__name__ for c in type(exc).__mro__}
    where = cfg.endpoint or "the Hugging Face Hub"
    if isinstance(exc, OSError) or names & {"TransportError", "RequestError", "ConnectError", "TimeoutException"}:
        return f"cannot reach {where} (offline?): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status in (401, 403):
        return f"{where} refused the upload to {cfg.repo_id} (HTTP {status}): {LOGIN_HINT}"
    if "HfHubHTTPError" in names:
        return f"{where} refused the upload to {cfg.repo_id}: {str(exc).strip().splitlines()[0]}"
    raise exc
