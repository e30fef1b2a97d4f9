"""Inference scaling for corpus RAG (the inference-scaling paper): DRAG and IterDRAG configurations
θ = (k documents, m demonstrations, n iterations), token budgets, a resumable grid runner with its
summaries (``grid``), each configuration's first-call size (``sizing``), making demonstrations
(``demonstrations``), the computation allocation model (``allocation``), choosing a configuration
with it (``planner``), testing it on a dataset it was not fitted on (``leave_one_out``), and the
scaling plots (``plots``).
"""
