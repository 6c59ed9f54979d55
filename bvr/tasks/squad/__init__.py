"""SQuAD v1.1 and v2.0: questions and contexts as token windows (:mod:`~bvr.tasks.squad.windows`), the best answer
span of each question from its windows' scores (:mod:`~bvr.tasks.squad.decode`) and the official metrics, exact match
and F1 (:mod:`~bvr.tasks.squad.metric`). The JSON files are read by :mod:`bvr.tasks.readers.squad_json`; the span head
is :class:`~bvr.tasks.heads.TokenHead` with two outputs."""
