"""Reading the files people keep (PDF, DOCX, EPUB, HTML, Markdown, text, spreadsheets, slides, scans and images)
with a map from text to page, chapter, sheet, row and slide, and citing where an answer came from. The rest of
ragfunnel sees :class:`SourceDocument`, :class:`LocatedContext` and :class:`Citation` only."""

from ragfunnel.documents.citations import NOT_STATED, Citation, cite, cited
from ragfunnel.documents.formats import SUPPORTED
from ragfunnel.documents.limits import ReadLimits
from ragfunnel.documents.model import FILE_SEPARATOR, LocatedContext, Section, SourceDocument
from ragfunnel.documents.read import files_under, read_context, read_document, read_documents, resolved

__all__ = ["FILE_SEPARATOR", "NOT_STATED", "SUPPORTED", "Citation", "LocatedContext", "ReadLimits", "Section",
           "SourceDocument", "cite", "cited", "files_under", "read_context", "read_document", "read_documents",
           "resolved"]
