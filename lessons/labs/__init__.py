"""Each page's logic, one module per page, with no Streamlit: it computes, the page lays the result out.

bandwidth (lesson 1), gqa (2), packing (3), fragmentation (4), paged and paged_kernel (5), diagnosis (6),
playground and kv_precision (lessons 2 and 7's precision section); choices offers the catalog's models and GPUs
to the pages' select boxes. A lab hands its page frozen dataclasses in the page's units, each with the rows of
its table or download; every lesson lab's `claims()` runs the page's live evidence at its defaults
(bench/evidence.py collects them).
"""
