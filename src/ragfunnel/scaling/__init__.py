"""Inference scaling for corpus RAG (the inference-scaling paper): DRAG and IterDRAG configurations
θ = (k documents, m demonstrations, n iterations), token budgets, a resumable grid runner with its
summaries (``grid``), each configuration's first-call size (``sizing``), making demonstrations
(``demonstrations``), the computation allocation model and its planner (``allocation``), and the
scaling plots (``plots``).
"""
