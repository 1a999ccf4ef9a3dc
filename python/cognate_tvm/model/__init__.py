"""The COGNATE cost model: featurizer, knob encoders, predictor, and the trainable model."""
from .cognate import FORMAT_VERSION, CognateCostModel, RankingModel
from .config import FeaturizerConfig, LatentConfig, ModelConfig, PredictorConfig, TrainConfig
from ..data import matrix_hash
from .ensemble import RankEnsemble
from .featurizer import SparseConvFeaturizer, SparsePattern, pattern_of
from .loading import SOURCE_PLATFORM, load_model, load_shipped_model
from .latent import LatentAutoencoder, NoKnobs, PaddedKnobs, ReconstructionReport, create_encoder
from .predictor import ConfigEmbedding, CostPredictor, ScoreHead
from .pretrained import PRETRAINED_DIR, available_pretrained, load_pretrained, pretrained_path

__all__ = ["FORMAT_VERSION", "CognateCostModel", "RankingModel", "FeaturizerConfig", "LatentConfig",
           "ModelConfig", "PredictorConfig", "TrainConfig", "RankEnsemble", "SparseConvFeaturizer", "SparsePattern",
           "matrix_hash", "pattern_of", "LatentAutoencoder", "NoKnobs", "PaddedKnobs",
           "ReconstructionReport", "create_encoder", "ConfigEmbedding", "CostPredictor", "ScoreHead",
           "PRETRAINED_DIR", "available_pretrained", "load_pretrained", "pretrained_path", "SOURCE_PLATFORM",
           "load_model", "load_shipped_model"]
