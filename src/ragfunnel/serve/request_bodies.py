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

from ragfunnel.bounded import TooDeep, TooManyDigits, loads
from ragfunnel.documents import LocatedContext, ReadLimits, SourceDocument, read_document
from ragfunnel.documents.formats import SUPPORTED_LINE, SUPPORTED_SUFFIXES
from ragfunnel.documents.progress import progress_named
from ragfunnel.errors import InputError, RagfunnelError, option
from ragfunnel.serve.settings import QUESTION_CHARS, SEARCH_TOP_K, check_question_size
from ragfunnel.text.hygiene import clean_text, replace_lone_surrogates

log = logging.getLogger("ragfunnel.serve")

# The longest value of each field a client names things by, the same on every route that takes it.
NAME_CHARS = 1000  # a document's label
TASK_CHARS = 100
METHOD_CHARS = 100
DOCUMENT_ID_CHARS = 100
INDEX_CHARS = 200


def _clean(value: Any) -> Any:
    return clean_text(value, source="a request's text") if isinstance(value, str) else value


def _clean_all(value: Any) -> Any:
    return replace_lone_surrogates(value)[0]


# Request text with lone surrogates (JSON's "\ud800") replaced by U+FFFD before anything hashes or stores it.
Text = Annotated[str, BeforeValidator(_clean)]


def _question_size(question: str) -> str:
    try:
        return check_question_size(question)
    except InputError as e:  # pydantic reports a ValueError as the field's complaint
        raise ValueError(str(e)) from None


Question = Annotated[str, BeforeValidator(_clean), AfterValidator(_question_size),
                     Field(description=f"At most {QUESTION_CHARS:,} characters.")]


DocumentName = Annotated[Text, Field(max_length=NAME_CHARS, description="A label to show for it.")]
Task = Annotated[str, Field(max_length=TASK_CHARS)]


class DocumentFields(BaseModel):
    """A stored document's fields besides its text: those of a JSON body, and the form fields of an upload."""

    model_config = ConfigDict(extra="forbid")
    name: DocumentName = ""
    task: Task = Field("qa", description="The prompt family its questions will use (the models read it so).")


class DocumentIn(DocumentFields):
    text: Text = Field(description="The document's text (UTF-8).")


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: Question
    document_id: str | None = Field(None, max_length=DOCUMENT_ID_CHARS,
                                    description="A stored document (POST /v1/documents) ...")
    text: Text | None = Field(None, description="... or the text itself ...")
    index: str | None = Field(None, max_length=INDEX_CHARS,
                              description="... or an index the server was started with (corpus methods).")
    method: str | None = Field(None, max_length=METHOD_CHARS,
                               description="Default: auto over a text, funnel over an index.")
    options: Annotated[dict[str, Any], BeforeValidator(_clean_all)] = Field(
        default_factory=dict, description="The method's options, e.g. budget (GET /v1/methods lists them).")
    choices: list[Annotated[Text, Field(max_length=10_000)]] | None = Field(None, max_length=100)
    task: Task = "qa"
    stream: bool = Field(False, description="Server-sent events: token, stage and result (or error).")


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: str = Field(max_length=INDEX_CHARS, description="An index the server was started with (--index NAME=DIR).")
    question: Question
    top_k: int = Field(4, ge=1, le=SEARCH_TOP_K)
    funnel: bool = Field(True, description="FunnelRAG's three stages, or flat dense retrieval (index --flat).")


def json_body(model: type[BaseModel], raw: bytes) -> Any:
    """``raw`` parsed and validated as FastAPI does for a declared body, with the same error shapes."""
    try:
        data = loads(raw)
    except (TooDeep, TooManyDigits) as e:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": f"JSON {e}"}}]) from None
    except json.JSONDecodeError as e:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", e.pos), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": e.msg}}]) from None
    except UnicodeDecodeError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error",
                                       "input": {}, "ctx": {"error": "not UTF-8"}}]) from None
    return validated(model, data)


def validated(model: type[BaseModel], data: Any) -> Any:
    """``data`` validated as a request body of ``model``, its errors placed in the body as FastAPI places them."""
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
        **DocumentFields.model_json_schema()["properties"]}}}}}}


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

    def label(self, located: LocatedContext) -> str:
        """The stored document's name: the ``name`` field, else its files' names, within :data:`NAME_CHARS`
        as a name sent in the field is."""
        joined = ", ".join(d.name for d in located.documents)
        return self.name or (joined if len(joined) <= NAME_CHARS else joined[:NAME_CHARS - 1] + "…")


async def receive_upload(request: Request, *, max_bytes: int) -> Upload:
    """The files and fields of a multipart upload; neither a part nor a file may exceed ``max_bytes`` (the
    server's body limit). Reading them is a job for the queue (:meth:`Upload.read`)."""
    # Too many files or fields, or a malformed body: Starlette answers 400 with the reason.
    form = await request.form(max_files=UPLOAD_FILES, max_fields=10, max_part_size=max_bytes)
    uploads = [v for k, v in form.multi_items() if k == UPLOAD_FIELD and isinstance(v, StarletteUpload)]
    if not uploads:
        raise InputError(f"the upload holds no files; send each as a multipart field named {UPLOAD_FIELD!r}")
    fields = validated(DocumentFields, {k: v for k, v in form.multi_items() if k in DocumentFields.model_fields})
    names = distinct_names([shown_name(upload.filename, f"upload-{i + 1}") for i, upload in enumerate(uploads)])
    files = tuple([UploadedFile(name, await upload.read()) for name, upload in zip(names, uploads, strict=True)])
    return Upload(files, fields.name, fields.task)


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


def distinct_names(names: list[str]) -> list[str]:
    """``names`` with each repeat made distinct as a file manager does (``notes.txt``, ``notes (2).txt``), never
    taking a name the client gave another file: a citation names its file, so two files must not share one."""
    taken, shown = set(names), []
    for name in names:
        if name in shown:
            cut = len(name) - len(_suffix(name))  # the suffix as the client wrote it (".PDF")
            stem, suffix, copy = name[:cut], name[cut:], 2
            while (name := _copy_name(stem, copy, suffix)) in taken:
                copy += 1
            taken.add(name)
        shown.append(name)
    return shown


def _copy_name(stem: str, copy: int, suffix: str) -> str:
    """``stem (copy)suffix``, the stem cut to keep it within :data:`MAX_NAME_CHARS`."""
    tag = f" ({copy})"
    return stem[:MAX_NAME_CHARS - len(tag) - len(suffix)] + tag + suffix


def _suffix(name: str) -> str:
    """The name's suffix if a reader knows it (``.pdf``, ``.md`` ...), else none: the reader then goes by the
    file's first bytes alone."""
    suffix = Path(name).suffix.lower()
    return suffix if suffix in SUPPORTED_SUFFIXES else ""


def _read_uploaded(file: UploadedFile, path: Path, limits: ReadLimits) -> SourceDocument:
    path.write_bytes(file.data)
    try:
        with progress_named(path.name, file.name):
            document = read_document(path, limits)
    except InputError as e:  # the reader named the file by the name made for it; the client knows its own
        raise InputError(e.spelled(option).replace(str(path), file.name).replace(path.name, file.name)) from None
    except RagfunnelError:
        raise
    except Exception as e:  # a reader library tripped on hostile bytes: the client's file, not a server fault
        log.warning("an upload could not be read: %s: %s", type(e).__name__, e)
        raise InputError(f"{file.name} could not be read ({type(e).__name__}); check that it is a valid file of "
                         f"a format ragfunnel reads: {SUPPORTED_LINE}") from None
    return replace(document, name=file.name)
