"""The GPU catalogue's entries: one per GPU model, each with its datasheet.

controller.model.gpus.catalog indexes `ENTRIES` by gpuflow's name and by the product
names NVML reports. Those names are as the driver prints them: the "Compatible GPUs"
table of NVIDIA's open-gpu-kernel-modules README (release 560.31.02) for Turing and
later parts; Runpod's GPU type IDs, which are the nvidia-smi names
(docs.runpod.io/references/gpu-types), for the V100s, the H200 NVL and the B200;
`nvidia-smi -L` output for the Tesla K80, T4 and P100 (e.g. on Google Colab). Older
drivers (before R470) drop the "NVIDIA " prefix ("A100-SXM4-40GB"): the catalogue's
normalised lookup finds those too.

Figures come from each model's NVIDIA datasheet (named per entry); tensor figures
the datasheets give "with sparsity" are halved to the dense ones. GeForce and RTX
figures are the architecture white papers' "FP16 Tensor TFLOPS with FP32 accumulate".
Memory is the datasheet's GB as MiB x 1024, as before for the models that kept their
figures (V100, A100 SXM4, H100 SXM5, P100, T4, A10). Speeds: cited where a training
comparison is (the V100 is 1.0 by definition), else derived (`speed_from`).
"""

from __future__ import annotations

from controller.model.gpus.catalog import GpuSpec, derived

# NVLink generations 2-4: 25 GB/s per link per direction = 200 Gbit/s (V100: 6 links =
# 300 GB/s, A100: 12 = 600 GB/s, H100: 18 = 900 GB/s, totals over both directions:
# the V100, A100 and H100 datasheets). NVLink 5 (B200): 18 links = 1.8 TB/s, 400
# Gbit/s each way per link. GA102 boards (A40, RTX A6000, RTX 3090): 4 links through a
# bridge, 112.5 GB/s in all, 14.0625 GB/s = 112.5 Gbit/s each way per link.
NVLINK_GBPS = 200.0
NVLINK5_GBPS = 400.0
GA102_NVLINK_GBPS = 112.5

# --- Kepler, Pascal, Volta, Turing -------------------------------------------------------------

K80 = GpuSpec(
    # NVIDIA Tesla K80 datasheet: a board of two GK210 GPUs, each (as NVML lists it, one
    # "Tesla K80" device) 12 GB GDDR5 at 240 GB/s and 4.37 FP32 TFLOPS at boost (8.73
    # for the board), no tensor cores and no faster FP16, PCIe Gen3. Speed 0.3: the
    # geometric mean of K80/V100 steps per second over the 26 job types Gavel measured
    # on one GPU of each (Narayanan et al., OSDI 2020; simulation_throughputs.json).
    name="K80",
    products=("Tesla K80",),
    compute_capability=(3, 7),
    mem_mib=12288,
    mem_gbs=240.0,
    pcie_gen=3,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=4.37,
    tf32_tflops=None,
    bf16_tflops=None,
    fp16_tflops=4.37,
    speed=0.3,
    source="NVIDIA Tesla K80 datasheet",
)
P100_PCIE = GpuSpec(
    # Tesla P100 PCIe datasheet: 16 GB CoWoS HBM2, 732 GB/s, 9.3 FP32 / 18.7 FP16
    # TFLOPS (no tensor cores), PCIe Gen3. Speed 0.5: gpuflow's assumption for the
    # openb trace's P100s (FP16 and memory bandwidth against a V100's, rounded down).
    name="P100-PCIE-16GB",
    products=("Tesla P100-PCIE-16GB",),
    compute_capability=(6, 0),
    mem_mib=16384,
    mem_gbs=732.0,
    pcie_gen=3,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=9.3,
    tf32_tflops=None,
    bf16_tflops=None,
    fp16_tflops=18.7,
    speed=0.5,
    source="NVIDIA Tesla P100 PCIe datasheet",
)
V100_SXM2_16GB = GpuSpec(
    # NVIDIA Tesla V100 datasheet (SXM2): 16 GB HBM2, 900 GB/s, 15.7 FP32 and 125 tensor
    # TFLOPS, NVLink 300 GB/s (6 links), PCIe Gen3. The unit of speed: the model
    # catalogue's profiles are measured on or scaled to a V100.
    name="V100-SXM2-16GB",
    products=("Tesla V100-SXM2-16GB",),
    compute_capability=(7, 0),
    mem_mib=16384,
    mem_gbs=900.0,
    pcie_gen=3,
    nvlink_lanes=6,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=15.7,
    tf32_tflops=None,
    bf16_tflops=None,
    fp16_tflops=125.0,
    speed=1.0,
    source="NVIDIA Tesla V100 datasheet",
)
V100_SXM2_32GB = GpuSpec(
    # As the 16 GB part with 32 GB (Tesla V100 datasheet).
    name="V100-SXM2-32GB",
    products=("Tesla V100-SXM2-32GB",),
    compute_capability=(7, 0),
    mem_mib=32768,
    mem_gbs=900.0,
    pcie_gen=3,
    nvlink_lanes=6,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=15.7,
    tf32_tflops=None,
    bf16_tflops=None,
    fp16_tflops=125.0,
    speed=1.0,
    source="NVIDIA Tesla V100 datasheet",
)
V100_PCIE_16GB = GpuSpec(
    # Tesla V100 datasheet (PCIe): no NVLink, 14 FP32 and 112 tensor TFLOPS at 250 W;
    # speed 112/125 = 0.9 of the SXM2 part.
    name="V100-PCIE-16GB",
    products=("Tesla V100-PCIE-16GB",),
    compute_capability=(7, 0),
    mem_mib=16384,
    mem_gbs=900.0,
    pcie_gen=3,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=14.0,
    tf32_tflops=None,
    bf16_tflops=None,
    fp16_tflops=112.0,
    speed=0.9,
    source="NVIDIA Tesla V100 datasheet",
)
V100_PCIE_32GB = GpuSpec(
    name="V100-PCIE-32GB",
    products=("Tesla V100-PCIE-32GB",),
    compute_capability=(7, 0),
    mem_mib=32768,
    mem_gbs=900.0,
    pcie_gen=3,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=14.0,
    tf32_tflops=None,
    bf16_tflops=None,
    fp16_tflops=112.0,
    speed=0.9,
    source="NVIDIA Tesla V100 datasheet",
)
T4 = GpuSpec(
    # NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s, 8.1 FP32 and 65 FP16 tensor TFLOPS,
    # PCIe Gen3, 70 W. Speed 0.35: gpuflow's assumption from the tensor throughput and
    # bandwidth against a V100's, rounded down for the older memory system.
    name="T4-16GB",
    products=("Tesla T4",),
    compute_capability=(7, 5),
    mem_mib=16384,
    mem_gbs=320.0,
    pcie_gen=3,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=8.1,
    tf32_tflops=None,
    bf16_tflops=None,
    fp16_tflops=65.0,
    speed=0.35,
    source="NVIDIA T4 datasheet",
)

# --- Ampere ----------------------------------------------------------------------------

A100_SXM4_40GB = GpuSpec(
    # NVIDIA A100 Tensor Core GPU datasheet: 40 GB HBM2 at 1,555 GB/s; 19.5 FP32, 156
    # TF32 and 312 BF16/FP16 tensor TFLOPS (dense); NVLink 600 GB/s (12 links); PCIe
    # Gen4. Speed: NVIDIA reports about 3x V100 on BERT-Large training in mixed
    # precision ("NVIDIA Ampere Architecture In-Depth", May 2020); 2.5 because
    # convolutional models gain less.
    name="A100-SXM4-40GB",
    products=("NVIDIA A100-SXM4-40GB",),
    compute_capability=(8, 0),
    mem_mib=40960,
    mem_gbs=1555.0,
    pcie_gen=4,
    nvlink_lanes=12,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=19.5,
    tf32_tflops=156.0,
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    speed=2.5,
    source="NVIDIA A100 Tensor Core GPU datasheet",
)
A100_SXM4_80GB = GpuSpec(
    # A100 datasheet, 80 GB HBM2e at 2,039 GB/s; otherwise as the 40 GB part.
    name="A100-SXM4-80GB",
    products=("NVIDIA A100-SXM4-80GB",),
    compute_capability=(8, 0),
    mem_mib=81920,
    mem_gbs=2039.0,
    pcie_gen=4,
    nvlink_lanes=12,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=19.5,
    tf32_tflops=156.0,
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    speed=2.5,
    source="NVIDIA A100 Tensor Core GPU datasheet",
)
A100_PCIE_40GB = GpuSpec(
    # A100 datasheet, PCIe 40 GB: 1,555 GB/s, the SXM4 part's peak throughputs, NVLink
    # bridge for two GPUs at 600 GB/s.
    name="A100-PCIE-40GB",
    products=("NVIDIA A100-PCIE-40GB",),
    compute_capability=(8, 0),
    mem_mib=40960,
    mem_gbs=1555.0,
    pcie_gen=4,
    nvlink_lanes=12,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=19.5,
    tf32_tflops=156.0,
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    speed=derived(A100_SXM4_40GB, 312.0, 1555.0),
    source="NVIDIA A100 Tensor Core GPU datasheet",
    speed_from=A100_SXM4_40GB.name,
)
A100_PCIE_80GB = GpuSpec(
    # A100 datasheet, 80 GB PCIe: HBM2e at 1,935 GB/s, NVLink bridge at 600 GB/s.
    name="A100-PCIE-80GB",
    products=("NVIDIA A100 80GB PCIe",),
    compute_capability=(8, 0),
    mem_mib=81920,
    mem_gbs=1935.0,
    pcie_gen=4,
    nvlink_lanes=12,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=19.5,
    tf32_tflops=156.0,
    bf16_tflops=312.0,
    fp16_tflops=312.0,
    speed=derived(A100_SXM4_80GB, 312.0, 1935.0),
    source="NVIDIA A100 Tensor Core GPU datasheet",
    speed_from=A100_SXM4_80GB.name,
)
A30 = GpuSpec(
    # NVIDIA A30 datasheet: 24 GB HBM2 at 933 GB/s; 10.3 FP32, 82 TF32 and 165
    # BF16/FP16 tensor TFLOPS (dense); NVLink bridge 200 GB/s (4 links); PCIe Gen4.
    name="A30-24GB",
    products=("NVIDIA A30",),
    compute_capability=(8, 0),
    mem_mib=24576,
    mem_gbs=933.0,
    pcie_gen=4,
    nvlink_lanes=4,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=10.3,
    tf32_tflops=82.0,
    bf16_tflops=165.0,
    fp16_tflops=165.0,
    speed=derived(A100_SXM4_40GB, 165.0, 933.0),
    source="NVIDIA A30 Tensor Core GPU datasheet",
    speed_from=A100_SXM4_40GB.name,
)
A10 = GpuSpec(
    # NVIDIA A10 datasheet: 24 GB GDDR6 at 600 GB/s; 31.2 FP32, 62.5 TF32 and 125
    # BF16/FP16 tensor TFLOPS (dense); PCIe Gen4, no NVLink. Speed 0.8: gpuflow's
    # assumption from the tensor throughput and bandwidth against a V100's.
    name="A10-24GB",
    products=("NVIDIA A10",),
    compute_capability=(8, 6),
    mem_mib=24576,
    mem_gbs=600.0,
    pcie_gen=4,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=31.2,
    tf32_tflops=62.5,
    bf16_tflops=125.0,
    fp16_tflops=125.0,
    speed=0.8,
    source="NVIDIA A10 Tensor Core GPU datasheet",
)
A40 = GpuSpec(
    # NVIDIA A40 datasheet: 48 GB GDDR6 at 696 GB/s; 37.4 FP32, 74.8 TF32 and 149.7
    # BF16/FP16 tensor TFLOPS (dense); NVLink bridge 112.5 GB/s; PCIe Gen4.
    name="A40-48GB",
    products=("NVIDIA A40",),
    compute_capability=(8, 6),
    mem_mib=49152,
    mem_gbs=696.0,
    pcie_gen=4,
    nvlink_lanes=4,
    nvlink_lane_gbps=GA102_NVLINK_GBPS,
    fp32_tflops=37.4,
    tf32_tflops=74.8,
    bf16_tflops=149.7,
    fp16_tflops=149.7,
    speed=derived(A10, 149.7, 696.0),
    source="NVIDIA A40 datasheet",
    speed_from=A10.name,
)
RTX_A6000 = GpuSpec(
    # NVIDIA RTX A6000 datasheet and the Ampere GA102 white paper: 48 GB GDDR6 at 768
    # GB/s; 38.7 FP32, 77.4 TF32 and 154.8 BF16/FP16 (FP32 accumulate) tensor TFLOPS
    # dense; NVLink bridge 112.5 GB/s; PCIe Gen4.
    name="RTX-A6000-48GB",
    products=("NVIDIA RTX A6000",),
    compute_capability=(8, 6),
    mem_mib=49152,
    mem_gbs=768.0,
    pcie_gen=4,
    nvlink_lanes=4,
    nvlink_lane_gbps=GA102_NVLINK_GBPS,
    fp32_tflops=38.7,
    tf32_tflops=77.4,
    bf16_tflops=154.8,
    fp16_tflops=154.8,
    speed=derived(A10, 154.8, 768.0),
    source="NVIDIA RTX A6000 datasheet; NVIDIA Ampere GA102 GPU Architecture white paper",
    speed_from=A10.name,
)
RTX_3090 = GpuSpec(
    # NVIDIA Ampere GA102 white paper, GeForce RTX 3090: 24 GB GDDR6X at 936 GB/s; 35.6
    # FP32, 35.6 TF32 and 71 BF16/FP16 tensor TFLOPS with FP32 accumulate (dense);
    # NVLink bridge 112.5 GB/s; PCIe Gen4.
    name="RTX-3090-24GB",
    products=("NVIDIA GeForce RTX 3090",),
    compute_capability=(8, 6),
    mem_mib=24576,
    mem_gbs=936.0,
    pcie_gen=4,
    nvlink_lanes=4,
    nvlink_lane_gbps=GA102_NVLINK_GBPS,
    fp32_tflops=35.6,
    tf32_tflops=35.6,
    bf16_tflops=71.0,
    fp16_tflops=71.0,
    speed=derived(A10, 71.0, 936.0),
    source="NVIDIA Ampere GA102 GPU Architecture white paper",
    speed_from=A10.name,
)

# --- Ada Lovelace: no cited training figure; derived from the A10 (GA10x, the nearest
# cited part), the newer tensor cores showing in their throughput --------------------

L4 = GpuSpec(
    # NVIDIA L4 datasheet: 24 GB GDDR6 at 300 GB/s; 30.3 FP32, 120 TF32 and 242
    # BF16/FP16 tensor TFLOPS with sparsity (60 and 121 dense); PCIe Gen4, 72 W.
    name="L4-24GB",
    products=("NVIDIA L4",),
    compute_capability=(8, 9),
    mem_mib=24576,
    mem_gbs=300.0,
    pcie_gen=4,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=30.3,
    tf32_tflops=60.0,
    bf16_tflops=121.0,
    fp16_tflops=121.0,
    speed=derived(A10, 121.0, 300.0),
    source="NVIDIA L4 Tensor Core GPU datasheet",
    speed_from=A10.name,
)
L40 = GpuSpec(
    # NVIDIA L40 datasheet: 48 GB GDDR6 at 864 GB/s; 90.5 FP32, 181 TF32 and 362
    # BF16/FP16 tensor TFLOPS with sparsity (90.5 and 181 dense); PCIe Gen4.
    name="L40-48GB",
    products=("NVIDIA L40",),
    compute_capability=(8, 9),
    mem_mib=49152,
    mem_gbs=864.0,
    pcie_gen=4,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=90.5,
    tf32_tflops=90.5,
    bf16_tflops=181.0,
    fp16_tflops=181.0,
    speed=derived(A10, 181.0, 864.0),
    source="NVIDIA L40 datasheet",
    speed_from=A10.name,
)
L40S = GpuSpec(
    # NVIDIA L40S datasheet: 48 GB GDDR6 at 864 GB/s; 91.6 FP32, 366 TF32 and 733
    # BF16/FP16 tensor TFLOPS with sparsity (183 and 366 dense); PCIe Gen4.
    name="L40S-48GB",
    products=("NVIDIA L40S",),
    compute_capability=(8, 9),
    mem_mib=49152,
    mem_gbs=864.0,
    pcie_gen=4,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=91.6,
    tf32_tflops=183.0,
    bf16_tflops=366.0,
    fp16_tflops=366.0,
    speed=derived(A10, 366.0, 864.0),
    source="NVIDIA L40S datasheet",
    speed_from=A10.name,
)
RTX_4090 = GpuSpec(
    # NVIDIA Ada GPU Architecture white paper, GeForce RTX 4090: 24 GB GDDR6X at 1,008
    # GB/s; 82.6 FP32, 82.6 TF32 and 165.2 BF16/FP16 tensor TFLOPS with FP32
    # accumulate (dense); PCIe Gen4, no NVLink.
    name="RTX-4090-24GB",
    products=("NVIDIA GeForce RTX 4090",),
    compute_capability=(8, 9),
    mem_mib=24576,
    mem_gbs=1008.0,
    pcie_gen=4,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=82.6,
    tf32_tflops=82.6,
    bf16_tflops=165.2,
    fp16_tflops=165.2,
    speed=derived(A10, 165.2, 1008.0),
    source="NVIDIA Ada GPU Architecture white paper",
    speed_from=A10.name,
)
RTX_6000_ADA = GpuSpec(
    # NVIDIA Ada GPU Architecture white paper, RTX 6000 Ada Generation: 48 GB GDDR6 at
    # 960 GB/s; 91.1 FP32, 182.1 TF32 and 364.2 BF16/FP16 tensor TFLOPS with FP32
    # accumulate (dense); PCIe Gen4, no NVLink.
    name="RTX-6000-Ada-48GB",
    products=("NVIDIA RTX 6000 Ada Generation",),
    compute_capability=(8, 9),
    mem_mib=49152,
    mem_gbs=960.0,
    pcie_gen=4,
    nvlink_lanes=0,
    nvlink_lane_gbps=0.0,
    fp32_tflops=91.1,
    tf32_tflops=182.1,
    bf16_tflops=364.2,
    fp16_tflops=364.2,
    speed=derived(A10, 364.2, 960.0),
    source="NVIDIA Ada GPU Architecture white paper",
    speed_from=A10.name,
)

# --- Hopper, Blackwell -----------------------------------------------------------------

H100_SXM5 = GpuSpec(
    # NVIDIA H100 Tensor Core GPU datasheet (SXM): 80 GB HBM3 at 3.35 TB/s; 67 FP32,
    # 989 TF32 and 1,979 BF16/FP16 tensor TFLOPS with sparsity (494.5 and 989.5
    # dense); NVLink 900 GB/s (18 links); PCIe Gen5. Speed: "up to 4X" A100 on GPT-3
    # 175B (the datasheet); Lambda, "NVIDIA H100 Tensor Core GPU - Deep Learning
    # Performance Analysis" (2022): about 4x A100 for language models, 2x for vision;
    # gpuflow takes 2.4x an A100: 2.5 x 2.4 = 6.0.
    name="H100-SXM5-80GB",
    products=("NVIDIA H100 80GB HBM3",),
    compute_capability=(9, 0),
    mem_mib=81920,
    mem_gbs=3350.0,
    pcie_gen=5,
    nvlink_lanes=18,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=67.0,
    tf32_tflops=494.5,
    bf16_tflops=989.5,
    fp16_tflops=989.5,
    speed=6.0,
    source="NVIDIA H100 Tensor Core GPU datasheet",
)
H100_PCIE = GpuSpec(
    # H100 datasheet (PCIe): 80 GB HBM2e at 2 TB/s; 51 FP32, 756 TF32 and 1,513
    # BF16/FP16 TFLOPS with sparsity (378 and 756.5 dense); NVLink bridge 600 GB/s (12
    # links); PCIe Gen5.
    name="H100-PCIE-80GB",
    products=("NVIDIA H100 PCIe",),
    compute_capability=(9, 0),
    mem_mib=81920,
    mem_gbs=2000.0,
    pcie_gen=5,
    nvlink_lanes=12,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=51.0,
    tf32_tflops=378.0,
    bf16_tflops=756.5,
    fp16_tflops=756.5,
    speed=derived(H100_SXM5, 756.5, 2000.0),
    source="NVIDIA H100 Tensor Core GPU datasheet",
    speed_from=H100_SXM5.name,
)
H100_NVL = GpuSpec(
    # H100 datasheet (H100 NVL): 94 GB HBM3 at 3.9 TB/s; 60 FP32, 835 TF32 and 1,671
    # BF16/FP16 TFLOPS with sparsity (417.5 and 835.5 dense); NVLink bridge 600 GB/s;
    # PCIe Gen5.
    name="H100-NVL-94GB",
    products=("NVIDIA H100 NVL",),
    compute_capability=(9, 0),
    mem_mib=96256,
    mem_gbs=3900.0,
    pcie_gen=5,
    nvlink_lanes=12,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=60.0,
    tf32_tflops=417.5,
    bf16_tflops=835.5,
    fp16_tflops=835.5,
    speed=derived(H100_SXM5, 835.5, 3900.0),
    source="NVIDIA H100 Tensor Core GPU datasheet",
    speed_from=H100_SXM5.name,
)
H200_SXM = GpuSpec(
    # NVIDIA H200 Tensor Core GPU datasheet (SXM): 141 GB HBM3e at 4.8 TB/s; 67 FP32,
    # 989 TF32 and 1,979 BF16/FP16 tensor TFLOPS with sparsity (494.5 and 989.5
    # dense); NVLink 900 GB/s; PCIe Gen5. The derived 7.2 agrees with issue 27's H200:
    # ResNet-50 at 3,011 img/s in TF32 against the V100's 412 is 7.3.
    name="H200-SXM-141GB",
    products=("NVIDIA H200",),
    compute_capability=(9, 0),
    mem_mib=144384,
    mem_gbs=4800.0,
    pcie_gen=5,
    nvlink_lanes=18,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=67.0,
    tf32_tflops=494.5,
    bf16_tflops=989.5,
    fp16_tflops=989.5,
    speed=derived(H100_SXM5, 989.5, 4800.0),
    source="NVIDIA H200 Tensor Core GPU datasheet",
    speed_from=H100_SXM5.name,
)
H200_NVL = GpuSpec(
    # H200 datasheet (H200 NVL): 141 GB HBM3e at 4.8 TB/s; 60 FP32, 835 TF32 and 1,671
    # BF16/FP16 TFLOPS with sparsity; 2- or 4-way NVLink bridge at 900 GB/s; PCIe Gen5.
    name="H200-NVL-141GB",
    products=("NVIDIA H200 NVL",),
    compute_capability=(9, 0),
    mem_mib=144384,
    mem_gbs=4800.0,
    pcie_gen=5,
    nvlink_lanes=18,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=60.0,
    tf32_tflops=417.5,
    bf16_tflops=835.5,
    fp16_tflops=835.5,
    speed=derived(H100_SXM5, 835.5, 4800.0),
    source="NVIDIA H200 Tensor Core GPU datasheet",
    speed_from=H100_SXM5.name,
)
H20 = GpuSpec(
    # NVIDIA H20 (Hopper for the Chinese market), from NVIDIA's product brief as
    # reported (no public datasheet): 96 GB HBM3 at 4.0 TB/s; 44 FP32, 74 TF32 and 148
    # BF16/FP16 tensor TFLOPS dense; NVLink 900 GB/s; PCIe Gen5.
    name="H20-96GB",
    products=("NVIDIA H20",),
    compute_capability=(9, 0),
    mem_mib=98304,
    mem_gbs=4000.0,
    pcie_gen=5,
    nvlink_lanes=18,
    nvlink_lane_gbps=NVLINK_GBPS,
    fp32_tflops=44.0,
    tf32_tflops=74.0,
    bf16_tflops=148.0,
    fp16_tflops=148.0,
    speed=derived(H100_SXM5, 148.0, 4000.0),
    source="NVIDIA H20 product brief (as reported)",
    speed_from=H100_SXM5.name,
)
B200 = GpuSpec(
    # NVIDIA HGX B200 datasheet, per GPU (1,000 W): 180 GB HBM3e at 8 TB/s; 80 FP32,
    # 1,100 TF32 and 2,250 BF16/FP16 tensor TFLOPS dense; NVLink 5 at 1.8 TB/s (18
    # links); the host link taken as PCIe Gen5 (HGX B200 baseboards' hosts).
    name="B200-SXM-180GB",
    products=("NVIDIA B200",),
    compute_capability=(10, 0),
    mem_mib=184320,
    mem_gbs=8000.0,
    pcie_gen=5,
    nvlink_lanes=18,
    nvlink_lane_gbps=NVLINK5_GBPS,
    fp32_tflops=80.0,
    tf32_tflops=1100.0,
    bf16_tflops=2250.0,
    fp16_tflops=2250.0,
    speed=derived(H100_SXM5, 2250.0, 8000.0),
    source="NVIDIA HGX B200 datasheet",
    speed_from=H100_SXM5.name,
)

ENTRIES: tuple[GpuSpec, ...] = (
    K80,
    P100_PCIE,
    V100_SXM2_16GB,
    V100_SXM2_32GB,
    V100_PCIE_16GB,
    V100_PCIE_32GB,
    T4,
    A100_SXM4_40GB,
    A100_SXM4_80GB,
    A100_PCIE_40GB,
    A100_PCIE_80GB,
    A30,
    A10,
    A40,
    RTX_A6000,
    RTX_3090,
    L4,
    L40,
    L40S,
    RTX_4090,
    RTX_6000_ADA,
    H100_SXM5,
    H100_PCIE,
    H100_NVL,
    H200_SXM,
    H200_NVL,
    H20,
    B200,
)

# The GPU speeds are relative to (GpuType.speed).
SPEED_UNIT = V100_SXM2_16GB.name
