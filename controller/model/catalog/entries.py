"""The catalogue's entries: one profile per model, each with its citations.

controller.model.catalog indexes `PROFILES` by name and resolves names through
`ALIASES`, falling back to `GENERIC`. Figures are fp32, per V100, unless a comment says
otherwise. "Estimate" marks a figure gpuflow derived rather than read from its source;
the derivation is given. Pollux's six measured applications name their measurements
in `measured` (controller.model.catalog.measured).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from controller.model.catalog.profile import ModelProfile


def _per_sample(ips: float, batch: int, overhead_s: float) -> float:
    """Per-sample time from a published throughput (samples/s) at a batch."""
    return (batch / ips - overhead_s) / batch


# NVIDIA DeepLearningExamples, TensorFlow ResNet-50 v1.5 README (20.06 container),
# DGX-1 1x V100 16G, FP32 + XLA, batch 128: 412 img/s.
_RN50_V100_IPS = 412.0
# TensorFlow performance benchmarks (tensorflow.org/performance/benchmarks, May 2017),
# DGX-1 1x P100, synthetic data: ResNet-50 219, Inception-v3 142, VGG16 154, AlexNet
# 2987 img/s. Estimate: V100 figures = P100 figures x 412/219 (the ResNet-50 ratio).
_P100_TO_V100 = _RN50_V100_IPS / 219.0
_OVERHEAD_S = 0.01  # fixed per-iteration cost (launch, optimizer step): estimate

PROFILES: tuple[ModelProfile, ...] = (
    ModelProfile(
        # 25.6M parameters (He et al., CVPR'16, torchvision: 25,557,032); batch 256 as in
        # Goyal et al. 2017 (32 per GPU x 8). Memory and utilisation: estimates.
        name="resnet50",
        parameters_m=25.6,
        per_sample_s=_per_sample(_RN50_V100_IPS, 128, _OVERHEAD_S),
        overhead_s=_OVERHEAD_S,
        batch_size=256,
        local_batch=32,
        max_local_batch=128,
        mem_mib=5_000,
        gpu_util=0.95,
        skewed=False,
        source="He et al. CVPR'16; NVIDIA DeepLearningExamples RN50 v1.5 (V100 FP32 412 img/s)",
    ),
    ModelProfile(
        # Pollux's ImageNet job: ResNet-50, M0 = 200 (Qiao et al., OSDI'21 Table 1).
        name="imagenet",
        parameters_m=25.6,
        per_sample_s=1.44e-3,
        overhead_s=0.02,
        batch_size=200,
        local_batch=200,
        max_local_batch=200,
        mem_mib=12_000,
        gpu_util=0.95,
        skewed=False,
        measured="imagenet",
        source="Pollux OSDI'21 Table 1 and artifact profiles; He et al. CVPR'16",
    ),
    ModelProfile(
        # 138M parameters (Simonyan & Zisserman, ICLR'15 Table 2); skewed: its three FC
        # layers hold ~124M of them (Tiresias NSDI'19 §4, Fig. 4).
        name="vgg16",
        parameters_m=138.4,
        per_sample_s=_per_sample(154.0 * _P100_TO_V100, 32, _OVERHEAD_S),
        overhead_s=_OVERHEAD_S,
        batch_size=256,
        local_batch=32,
        max_local_batch=64,
        mem_mib=7_000,
        gpu_util=0.95,
        skewed=True,
        source="Simonyan & Zisserman ICLR'15; TF benchmarks 2017 (P100 154 img/s, scaled)",
    ),
    ModelProfile(
        # 61M parameters (Krizhevsky et al., NIPS'12), ~59M in the FC layers: skewed.
        name="alexnet",
        parameters_m=61.1,
        per_sample_s=_per_sample(2987.0 * _P100_TO_V100, 512, _OVERHEAD_S),
        overhead_s=_OVERHEAD_S,
        batch_size=512,
        local_batch=512,
        max_local_batch=1024,
        mem_mib=5_000,
        gpu_util=0.85,
        skewed=True,
        source="Krizhevsky et al. NIPS'12; TF benchmarks 2017 (P100 2987 img/s, scaled)",
    ),
    ModelProfile(
        # 23.8M parameters (Szegedy et al., CVPR'16 Inception-v3, without the aux head).
        name="inception3",
        parameters_m=23.8,
        per_sample_s=_per_sample(142.0 * _P100_TO_V100, 64, _OVERHEAD_S),
        overhead_s=_OVERHEAD_S,
        batch_size=256,
        local_batch=64,
        max_local_batch=64,
        mem_mib=9_000,
        gpu_util=0.95,
        skewed=False,
        source="Szegedy et al. CVPR'16; TF benchmarks 2017 (P100 142 img/s, scaled)",
    ),
    ModelProfile(
        # Pollux's BERT job: fine-tuning BERT-base (110M, Devlin et al., NAACL'19) on
        # SQuAD, M0 = 12 (OSDI'21 Table 1).
        name="bert",
        parameters_m=110.0,
        per_sample_s=0.0188,
        overhead_s=0.055,
        batch_size=12,
        local_batch=12,
        max_local_batch=12,
        mem_mib=12_000,
        gpu_util=0.95,
        skewed=False,
        measured="bert",
        source="Devlin et al. NAACL'19; Pollux OSDI'21 Table 1 and artifact profiles",
    ),
    ModelProfile(
        # GPT-2 small: 124M parameters (Radford et al. 2019; 124,439,808 in the released
        # checkpoint), 1024-token context, batch 512 (ibid. §2.3). Skewed: the 50257 x 768
        # token embedding is 31% of the model in one tensor. Compute, estimate: 6 x 124M x
        # 1024 = 7.6e11 FLOP per sample at 40% of the V100's 15.7 fp32 TFLOP/s.
        name="gpt2",
        parameters_m=124.4,
        per_sample_s=6 * 124.4e6 * 1024 / (0.4 * 15.7e12),
        overhead_s=_OVERHEAD_S,
        batch_size=512,
        local_batch=4,
        max_local_batch=8,
        mem_mib=12_000,
        gpu_util=0.98,
        skewed=True,
        source="Radford et al. 2019 (GPT-2); compute estimated from FLOPs",
    ),
    ModelProfile(
        # Pollux's YOLOv3 job on PASCAL-VOC, M0 = 8 (OSDI'21 Table 1); 61.9M parameters
        # (Redmon & Farhadi 2018, Darknet-53 + 3 heads at 80 classes; estimate).
        name="yolov3",
        parameters_m=61.9,
        per_sample_s=7.8e-3,
        overhead_s=0.055,
        batch_size=8,
        local_batch=8,
        max_local_batch=16,
        mem_mib=10_000,
        gpu_util=0.9,
        skewed=False,
        measured="yolov3",
        source="Redmon & Farhadi 2018; Pollux OSDI'21 Table 1 and artifact profiles",
    ),
    ModelProfile(
        # Pollux's DeepSpeech2 job on CMU-ARCTIC, M0 = 20 (OSDI'21 Table 1). 38M
        # parameters: the size Amodei et al. (ICML'16 §3.1, Table 1) keep fixed across
        # depths; the Pollux variant's count is not published (estimate).
        name="deepspeech2",
        parameters_m=38.0,
        per_sample_s=7.2e-3,
        overhead_s=0.1,
        batch_size=20,
        local_batch=20,
        max_local_batch=80,
        mem_mib=9_000,
        gpu_util=0.9,
        skewed=False,
        measured="deepspeech2",
        source="Amodei et al. ICML'16; Pollux OSDI'21 Table 1 and artifact profiles",
    ),
    ModelProfile(
        # Pollux's NCF job: NeuMF on MovieLens, M0 = 256 (OSDI'21 Table 1; He et al.,
        # WWW'17). Estimate: (6,040 users + 3,706 items) x (64 GMF + 128 MLP) embedding
        # dims = 1.9M parameters, nearly all in embedding tables, hence skewed.
        name="ncf",
        parameters_m=1.9,
        per_sample_s=2e-7,
        overhead_s=2.2e-3,
        batch_size=256,
        local_batch=256,
        max_local_batch=32768,
        mem_mib=1_500,
        gpu_util=0.3,
        skewed=True,
        measured="ncf",
        source="He et al. WWW'17 (NCF); Pollux OSDI'21 Table 1 and artifact profiles",
    ),
    ModelProfile(
        # Pollux's CIFAR-10 job: ResNet-18 (CIFAR variant, 11.2M parameters), M0 = 128
        # (OSDI'21 Table 1).
        name="cifar10",
        parameters_m=11.2,
        per_sample_s=2.2e-4,
        overhead_s=5.8e-3,
        batch_size=128,
        local_batch=128,
        max_local_batch=1024,
        mem_mib=3_000,
        gpu_util=0.7,
        skewed=False,
        measured="cifar10",
        source="He et al. CVPR'16 (ResNet-18); Pollux OSDI'21 Table 1 and artifact profiles",
    ),
    ModelProfile(
        # Transformer base: 65M parameters (Vaswani et al., NeurIPS'17 Table 3). Skewed:
        # the shared 37k-token embedding is ~19M in one tensor. Compute: estimate, 6 x 65M
        # x 50 tokens per sentence at 40% of fp32 peak.
        name="transformer",
        parameters_m=65.0,
        per_sample_s=6 * 65e6 * 50 / (0.4 * 15.7e12),
        overhead_s=_OVERHEAD_S,
        batch_size=128,
        local_batch=64,
        max_local_batch=128,
        mem_mib=6_000,
        gpu_util=0.85,
        skewed=True,
        source="Vaswani et al. NeurIPS'17; compute estimated from FLOPs",
    ),
    ModelProfile(
        # LSTM language model, Zaremba et al. 2014 "large": 66M parameters, 35 steps, batch
        # 20; embedding and softmax are most of it: skewed. Compute: estimate, 6 x 66M x 35
        # tokens at 30% of fp32 peak (LSTMs use the GPU less well).
        name="lm",
        parameters_m=66.0,
        per_sample_s=6 * 66e6 * 35 / (0.3 * 15.7e12),
        overhead_s=_OVERHEAD_S,
        batch_size=20,
        local_batch=20,
        max_local_batch=80,
        mem_mib=3_000,
        gpu_util=0.6,
        skewed=True,
        source="Zaremba et al. 2014; Gandiva OSDI'18 (LM jobs); compute estimated",
    ),
    ModelProfile(
        # A3C on Atari (Mnih et al., ICML'16): a ~4M-parameter conv net whose iteration is
        # dominated by environment steps on the CPU; all figures estimates.
        name="a3c",
        parameters_m=4.0,
        per_sample_s=1e-3,
        overhead_s=0.02,
        batch_size=20,
        local_batch=20,
        max_local_batch=20,
        mem_mib=1_000,
        gpu_util=0.2,
        skewed=False,
        source="Mnih et al. ICML'16; figures estimated",
    ),
    ModelProfile(
        # CycleGAN (Zhu et al., ICCV'17): two ResNet generators (~11.4M each) and two
        # PatchGAN discriminators (~2.8M each), batch 1; compute estimate.
        name="cyclegan",
        parameters_m=28.3,
        per_sample_s=0.15,
        overhead_s=_OVERHEAD_S,
        batch_size=1,
        local_batch=1,
        max_local_batch=4,
        mem_mib=4_000,
        gpu_util=0.9,
        skewed=False,
        source="Zhu et al. ICCV'17; figures estimated",
    ),
)

# The fallback for names the catalogue does not know: a mid-sized convolutional model
# (between ResNet-50 and VGG16 in size and speed), not skewed, a V100 kept mostly busy.
GENERIC = ModelProfile(
    name="generic",
    parameters_m=50.0,
    per_sample_s=3e-3,
    overhead_s=_OVERHEAD_S,
    batch_size=128,
    local_batch=32,
    max_local_batch=128,
    mem_mib=6_000,
    gpu_util=0.8,
    skewed=False,
    source="gpuflow's fallback for unknown models; figures estimated",
)

# Other spellings, keyed by the normalised name (lower case, letters and digits only).
# Gavel's job types (Narayanan et al., OSDI'20 Table 2) and Tiresias' model names.
ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "resnet": "resnet50",
        "resnet101": "resnet50",
        "resnet152": "resnet50",
        "resnet18": "cifar10",
        "vgg": "vgg16",
        "vgg11": "vgg16",
        "vgg13": "vgg16",
        "vgg19": "vgg16",
        "inception": "inception3",
        "inceptionv3": "inception3",
        "inception4": "inception3",
        "googlenet": "inception3",
        "bertbase": "bert",
        "bertlarge": "bert",
        "squad": "bert",
        "gpt": "gpt2",
        "yolo": "yolov3",
        "deepspeech": "deepspeech2",
        "neumf": "ncf",
        "recommendation": "ncf",
        "languagemodel": "lm",
        "lstm": "lm",
        "generic": "generic",
    }
)
