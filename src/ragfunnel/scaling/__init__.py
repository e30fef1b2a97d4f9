"""Inference scaling for corpus RAG (the inference-scaling paper): DRAG and IterDRAG configurations
θ = (k documents, m demonstrations, n iterations), token budgets and a resumable grid runner (``grid``),
its summaries and optimal-performance table (``summary``) and the files they are written to
(``summary_files``), the grid's methods and each configuration's first-call size (``sizing``), making
demonstrations (``demonstrations``), the computation allocation model (``allocation``) and its report
(``fit_report``), choosing a configuration with it (``planner``; for one task from its grid run,
``task_plan``), testing it on a dataset it was not fitted on (``leave_one_out``), and the scaling plots
(``plots``).
"""
