"""Sparse inputs: reading and writing, a synthetic corpus, statistics."""
from .io import EXAMPLE_MATRIX, as_csr, load_matrix, save_matrix
from .generators import FAMILIES, generate, generate_corpus, CorpusEntry
from .stats import LOCALITY_WIDTH, MatrixStats, hot_column_cover, locality_profile, matrix_stats

__all__ = ["EXAMPLE_MATRIX", "as_csr", "load_matrix", "save_matrix", "FAMILIES", "generate", "generate_corpus",
           "CorpusEntry", "LOCALITY_WIDTH", "MatrixStats", "hot_column_cover", "locality_profile",
           "matrix_stats"]
