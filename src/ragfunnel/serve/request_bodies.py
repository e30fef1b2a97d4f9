"""What a client may send the service: the JSON bodies (``DocumentIn``, ``AnswerIn``, ``SearchIn``), a body
read by hand with FastAPI's own error shapes (:func:`json_body`), and a multipart upload of files
(:func:`receive_upload`) read as one document by a job of the queue (:meth:`Upload.read`).
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from starlette.datastructures import UploadFile as StarletteUpload

from ragfunnel.bounded import TooDeep, loads
from ragfunnel.documents import LocatedContext, ReadLimits, SourceDocument, read_document
from ragfunnel.documents.formats import SUPPORTED_SUFFIXES
from ragfunnel.errors import InputError, RagfunnelError, option
from ragfunnel.serve.settings import SEARCH_TOP_K
from ragfunnel.text.hygiene import clean_text, replace_lone_surrogates

log = logging.getLogger("ragfunnel.serve")

QUESTION_CHARS = 20_000  # a question longer than this is a document sent in the wrong field


def _clean(value: Any) -> Any:
    return clean_text(value, source="a request's text") if isinstance(value, str) else value


def _clean_all(value: Any) -> Any:
    return replace_lone_surrogates(value)[0]


# Request text with lone surrogates (JSON's "\ud800") replaced by U+FFFD before anything hashes or stores it.
Text = Annotated[str, BeforeValidator(_clean)]


def _question_size(question: str) -> str:
    if len(question) > QUESTION_CHARS:
        raise ValueError(f"the question is {len(question):,} characters, over the limit of {QUESTION_CHARS:,}; "
                         "send long text as the document (text or document_id) and ask about it")
    return question


Question = Annotated[str, BeforeValidator(_clean), AfterValidator(_question_size),
                     Field(description=f"At most {QUESTION_CHARS:,} characters.")]


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Text = Field(description="The document's text (UTF-8).")
    name: Text = Field("", max_length=1000, description="A label to show for it.")
    task: str = Field("qa", max_length=100, description="The prompt family its questions will use (the models "
                                                        "read it so).")


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: Question
    document_id: str | None = Field(None, max_length=100, description="A stored document (POST /v1/documents) ...")
    text: Text | None = Field(None, description="... or the text itself ...")
    index: str | None = Field(None, max_length=200, description="... or an index the server was started with "
                                                                "(corpus methods).")
    method: str | None = Field(None, max_length=100, description="Default: auto over a text, funnel over an index.")
    options: Annotated[dict[str, Any], BeforeValidator(_clean_all)] = Field(
        default_factory=dict, description="The method's options, e.g. budget (GET /v1/methods lists them).")
    choices: list[Annotated[Text, Field(max_length=10_000)]] | None = Field(None, max_length=100)
    task: str = Field("qa", max_length=100)
    stream: bool = Field(False, description="Server-sent events: token, stage and result (or error).")


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: str = Field(max_length=200, description="An index the server was started with (--index NAME=DIR).")
    question: Question
    top_k: int = Field(4, ge=1, le=SEARCH_TOP_K)
    funnel: bool = Field(True, description="FunnelRAG's three stages, or flat dense retrieval (index --flat).")


def json_body(model: type[BaseModel], raw: bytes) -> Any:
    """``raw`` parsed and validated as FastAPI does for a declared body, with the same error shapes."""
    try:
        data = loads(raw)
    except TooDeep as e:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": f"JSON {e}"}}]) from None
    except json.JSONDecodeError as e:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": e.msg}}]) from None
    except UnicodeDecodeError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": "not UTF-8"}}]) from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])}
                                      for err in e.errors(include_url=False)]) from None


UPLOAD_FIELD = "file"
UPLOAD_FILES = 20  # files in one upload
UPLOAD_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": DocumentIn.model_json_schema()},
    "multipart/form-data": {"schema": {"type": "object", "required": [UPLOAD_FIELD], "properties": {
        UPLOAD_FIELD: {"type": "array", "items": {"type": "string", "format": "binary"}, "maxItems": UPLOAD_FILES},
        "name": {"type": "string", "maxLength": 1000}, "task": {"type": "string", "maxLength": 100}}}}}}}


@dataclass(frozen=True)
class UploadedFile:
    name: str  # the client's name for it, cleaned: the document's displayed name
    data: bytes


@dataclass(frozen=True)
class Upload:
    """A multipart upload, received: its files, and the ``name`` and ``task`` fields."""

    files: tuple[UploadedFile, ...]
    name: str
    task: str

    def read(self, limits: ReadLimits) -> LocatedContext:
        """The files read as one document. Each is written under a fresh temporary folder by a name made here
        (the client's name only lends it a known suffix, which the readers go by), so a client never names a
        server path; the client's name is the one shown and the one errors give."""
        with tempfile.TemporaryDirectory(prefix="ragfunnel-upload-") as folder:
            documents = [_read_uploaded(file, Path(folder) / f"upload-{i + 1}{_suffix(file.name)}", limits)
                         for i, file in enumerate(self.files)]
        return LocatedContext.join(documents)


async def receive_upload(request: Request, *, max_bytes: int) -> Upload:
    """The files and fields of a multipart upload; neither a part nor a file may exceed ``max_bytes`` (the
    server's body limit). Reading them is a job for the queue (:meth:`Upload.read`)."""
    # Too many files or fields, or a malformed body: Starlette answers 400 with the reason.
    form = await request.form(max_files=UPLOAD_FILES, max_fields=10, max_part_size=max_bytes)
    uploads = [v for k, v in form.multi_items() if k == UPLOAD_FIELD and isinstance(v, StarletteUpload)]
    if not uploads:
        raise InputError(f"the upload holds no files; send each as a multipart field named {UPLOAD_FIELD!r}")
    files = tuple([UploadedFile(shown_name(upload.filename, f"upload-{i + 1}"), await upload.read())
                   for i, upload in enumerate(uploads)])
    return Upload(files, _clean(str(form.get("name") or "")), str(form.get("task") or "qa"))


MAX_NAME_CHARS = 255
_PATH_SEPARATORS = re.compile(r"[/\\]")


def shown_name(filename: str | None, fallback: str) -> str:
    """A client's file name as the document shows it: its last path part (``/`` or ``\\``), with lone
    surrogates replaced and control and format characters dropped, at most 255 characters (its suffix kept);
    ``fallback`` for a name left empty, ``.`` or ``..``."""
    last = _PATH_SEPARATORS.split(replace_lone_surrogates(filename or "")[0])[-1]
    name = "".join(c for c in last if c.isprintable()).strip()
    if name in ("", ".", ".."):
        return fallback
    if len(name) > MAX_NAME_CHARS:
        suffix = _suffix(name)
        name = name[:MAX_NAME_CHARS - len(suffix)] + suffix
    return name


def _suffix(name: str) -> str:
    """The name's suffix if a reader knows it (``.pdf``, ``.md`` ...), else none: the reader then goes by the
    file's first bytes alone."""
    suffix = Path(name).suffix.lower()
    return suffix if suffix in SUPPORTED_SUFFIXES else ""


def _read_uploaded(file: UploadedFile, path: Path, limits: ReadLimits) -> SourceDocument:
    path.write_bytes(file.data)
    try:
        document = read_document(path, limits)
    except InputError as e:  # the reader named the file by the name made for it; the client knows its own
        raise InputError(e.spelled(option).replace(str(path), file.name).replace(path.name, file.name)) from None
    except RagfunnelError:
        raise
    except Exception as e:  # a reader library tripped on hostile bytes: the client's file, not a server fault
        log.warning("an upload could not be read: %s: %s", type(e).__name__, e)
        raise InputError(f"{file.name} could not be read ({type(e).__name__}); check that it is a valid PDF, "
                         "DOCX, EPUB, HTML, Markdown or text file") from None
    return replace(document, name=file.name)
