"""ragfunnel inside other frameworks: LangChain (``ragfunnel.integrations.langchain``, the [langchain] extra)
and LlamaIndex (``ragfunnel.integrations.llamaindex``, the [llamaindex] extra). They use ragfunnel's public
API only: ``ragfunnel.answer_located``, ``ragfunnel.search``, ``ragfunnel.methods`` and ``ragfunnel.documents``."""
