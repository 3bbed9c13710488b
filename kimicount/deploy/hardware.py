"""Accelerators: memory, HBM bandwidth and dense peak FLOP/s, each figure with where it comes from.

`plan` needs three things per GPU. Memory, twice: the total the vendor's tool reports (nvidia-smi,
rocm-smi: an H200 "141 GB" shows 143,771 MiB), printed so the user recognises the part, and the total
CUDA (or HIP) reports to a program, which is what engines size themselves against (vLLM multiplies
`torch.cuda.mem_get_info()`'s total by --gpu-memory-utilization) and which the driver keeps a few
hundred MiB under nvidia-smi's (an H200: 143,156 MiB). Then the HBM bandwidth that bounds a memory-bound
decode step, and the dense (not 2:4-sparse) tensor-core peak of the dtypes the weights compute in.
Each entry says where each figure comes from; a CUDA total no public log gives is estimated, and
says how. `--gpu-memory`, `--hbm-bandwidth`, `--peak-bf16` and `--peak-fp8` override any of them.

    >>> count, gpu = parse_gpus("8xH200")
    >>> count, gpu.name, gpu.memory_bytes // 2**20, gpu.cuda_memory_bytes // 2**20, gpu.hbm_bandwidth
    (8, 'H200', 143771, 143156, 4800000000000)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction

from kimicount.errors import MAX_COUNT, UsageError
from kimicount.options import parse_size

MIB = 2**20
TERA = 10**12


@dataclass(frozen=True)
class Accelerator:
    """One accelerator type. Sizes in bytes, rates in bytes/s and FLOP/s (Python ints).

    `memory_bytes` is the total as `memory_source` gives it (nvidia-smi, rocm-smi, a nominal size or
    --gpu-memory); `cuda_memory_bytes` the total CUDA or HIP reports to a program, which engines size
    against, from `cuda_memory_source`, an estimate when `cuda_memory_estimated`.
    `fp8_flops` is None where the chip has no FP8 tensor cores (A100): FP8 weights then compute in BF16.
    `overridden` names the figures the user replaced (they are no longer the table's).
    """

    name: str
    description: str
    memory_bytes: int
    memory_source: str
    cuda_memory_bytes: int
    cuda_memory_source: str
    hbm_bandwidth: int
    bf16_flops: int
    fp8_flops: int | None
    source: str
    cuda_memory_estimated: bool = False
    overridden: tuple[str, ...] = ()
    #: The software stack a program runs on it through: "cuda", or "rocm" (HIP); engines' rules differ by it.
    platform: str = "cuda"
    #: The GPU's memory is the system's, shared with the CPU (DGX Spark's GB10): no driver reports it apart.
    unified_memory: bool = False

    def peak_flops(self, compute: str) -> int:
        """Dense peak for a compute dtype ('bf16' or 'fp8'); fp8 falls back to bf16 without FP8 units.
        [FLOP/s]

        >>> ACCELERATORS["A100-80GB"].peak_flops("fp8") == ACCELERATORS["A100-80GB"].bf16_flops
        True
        """
        if compute == "fp8" and self.fp8_flops is not None:
            return self.fp8_flops
        return self.bf16_flops


def _tflops(dense: str) -> int:
    """A datasheet's dense TFLOPS as FLOP/s, exactly ('989.5' -> 989,500,000,000,000).

    >>> _tflops("989.5")
    989500000000000
    """
    return int(Fraction(dense) * TERA)


#: What a program sees of an H100 SXM5 (torch.cuda.get_device_properties; prints from 81,082 to 81,090
#: MiB are public, the driver's reservation moving a few MiB between versions).
H100_CUDA_MIB = 81_090
#: What nvidia-smi and CUDA report of a B200 (public logs): the part the driver keeps, used to estimate
#: the GB200's CUDA total from its nvidia-smi total.
B200_SMI_MIB, B200_CUDA_MIB = 183_359, 182_642
#: rocm-smi and HIP report an MI300X's 192 GiB as 196,592 MiB: 16 MiB under the nominal size.
MI300X_MIB = 196_592

#: The table. Memory: the total nvidia-smi / rocm-smi report, and the total CUDA / HIP report, as public
#: logs of each part show them. Peaks: dense tensor-core FLOP/s, half the datasheets' "with sparsity"
#: figures where they give those.
ACCELERATORS: dict[str, Accelerator] = {
    gpu.name: gpu
    for gpu in (
        Accelerator(
            "A100-80GB",
            "NVIDIA A100 SXM4 80GB",
            81_920 * MIB,
            "nvidia-smi",
            81_050 * MIB,
            "PyTorch's out-of-memory message on an A100 80GB: 'total capacity of 79.15 GiB', to 5 MiB",
            2_039 * 10**9,
            _tflops("312"),
            None,
            "NVIDIA A100 datasheet: 2,039 GB/s, BF16 312 TFLOPS dense (624 sparse), no FP8; "
            "nvidia-smi: 81,920 MiB",
        ),
        Accelerator(
            "H100",
            "NVIDIA H100 SXM5 80GB",
            81_559 * MIB,
            "nvidia-smi",
            H100_CUDA_MIB * MIB,
            "torch.cuda.get_device_properties on an H100 80GB HBM3, public logs: 81,082 to 81,090 MiB",
            3_350 * 10**9,
            _tflops("989.5"),
            _tflops("1979"),
            "NVIDIA H100 datasheet (SXM): 3.35 TB/s, BF16 1,979 and FP8 3,958 TFLOPS with sparsity, "
            "half dense; nvidia-smi: 81,559 MiB",
        ),
        Accelerator(
            "H800",
            "NVIDIA H800 SXM5 80GB",
            81_559 * MIB,
            "nvidia-smi",
            H100_CUDA_MIB * MIB,
            "the H100 SXM5's: same HBM3 and nvidia-smi total; no public H800 figure",
            3_350 * 10**9,
            _tflops("989.5"),
            _tflops("1979"),
            "NVIDIA H800 SXM5: H100 SXM5's memory, bandwidth and tensor cores (NVLink cut to 400 GB/s); "
            "nvidia-smi: 81,559 MiB",
            cuda_memory_estimated=True,
        ),
        Accelerator(
            "H20",
            "NVIDIA H20 96GB",
            97_871 * MIB,
            "nvidia-smi",
            97_285 * MIB,
            "torch.cuda.get_device_properties on an H20, public logs",
            4_000 * 10**9,
            _tflops("148"),
            _tflops("296"),
            "NVIDIA H20 product brief: 4.0 TB/s, BF16 148 and FP8 296 TFLOPS dense; nvidia-smi: 97,871 MiB",
        ),
        Accelerator(
            "H200",
            "NVIDIA H200 SXM 141GB",
            143_771 * MIB,
            "nvidia-smi",
            143_156 * MIB,
            "torch.cuda.get_device_properties on an H200, a public log: total_memory=143156MB",
            4_800 * 10**9,
            _tflops("989.5"),
            _tflops("1979"),
            "NVIDIA H200 datasheet (SXM): 4.8 TB/s, BF16 1,979 and FP8 3,958 TFLOPS with sparsity, "
            "half dense; nvidia-smi: 143,771 MiB",
        ),
        Accelerator(
            "B200",
            "NVIDIA B200 (HGX, 1,000 W)",
            B200_SMI_MIB * MIB,
            "nvidia-smi",
            B200_CUDA_MIB * MIB,
            "torch.cuda.get_device_properties on a B200, a public log; another shows 182,631",
            7_700 * 10**9,
            _tflops("2250"),
            _tflops("4500"),
            "NVIDIA HGX B200 datasheet, per GPU: 7.7 TB/s, BF16 4.5 and FP8 9 PFLOPS with sparsity, "
            "half dense; nvidia-smi: 183,359 MiB",
        ),
        Accelerator(
            "GB200",
            "NVIDIA GB200 NVL72, one Blackwell GPU (1,200 W)",
            189_471 * MIB,
            "nvidia-smi",
            (189_471 - (B200_SMI_MIB - B200_CUDA_MIB)) * MIB,
            "nvidia-smi's less the 717 MiB a B200's driver keeps; no public GB200 figure",
            8_000 * 10**9,
            _tflops("2500"),
            _tflops("5000"),
            "NVIDIA GB200 NVL72 datasheet, per GPU: 8 TB/s, BF16 5 and FP8 10 PFLOPS with sparsity, "
            "half dense; nvidia-smi: 189,471 MiB",
            cuda_memory_estimated=True,
        ),
        Accelerator(
            "MI300X",
            "AMD Instinct MI300X 192GB",
            MI300X_MIB * MIB,
            "rocm-smi",
            MI300X_MIB * MIB,
            "torch.cuda.get_device_properties on an MI300X (ROCm), the same as rocm-smi's",
            5_300 * 10**9,
            _tflops("1307.4"),
            _tflops("2614.9"),
            "AMD MI300X datasheet: 5.3 TB/s, BF16 1,307.4 and FP8 2,614.9 TFLOPS dense; "
            "rocm-smi: 206,141,652,992 B",
            platform="rocm",
        ),
        Accelerator(
            "MI325X",
            "AMD Instinct MI325X 256GB",
            256 * 1024 * MIB,
            "nominal",
            (256 * 1024 - (192 * 1024 - MI300X_MIB)) * MIB,
            "the nominal size less the 16 MiB an MI300X reports under its 192 GiB; no public figure",
            6_000 * 10**9,
            _tflops("1307.4"),
            _tflops("2614.9"),
            "AMD MI325X datasheet: 256 GB HBM3E at 6 TB/s, BF16 1,307.4 and FP8 2,614.9 TFLOPS dense; "
            "memory: the nominal 256 GiB (no device report found)",
            cuda_memory_estimated=True,
            platform="rocm",
        ),
    )
}

# --- consumer and workstation GPUs, for local llama.cpp runs (`plan --gguf/--quant`) ----------------

#: An RTX 3090's 24,576 MiB (nvidia-smi) show as 23.69 GiB (24,258 MiB) to PyTorch in public
#: out-of-memory messages: the driver keeps 318 MiB. No such print was found for the other cards:
#: their CUDA totals are nvidia-smi's less the same 318 MiB, and say so.
GEFORCE_DRIVER_MIB = 24_576 - 24_258


def _local_gpu(
    name: str, description: str, smi_mib: int, bandwidth_gbs: int, bf16: str, fp8: str | None, source: str
) -> Accelerator:
    """A card of the local table: CUDA total from nvidia-smi's less GEFORCE_DRIVER_MIB (measured on the
    3090, estimated on the others)."""
    measured = name == "RTX3090"
    return Accelerator(
        name,
        description,
        smi_mib * MIB,
        "nvidia-smi",
        (smi_mib - GEFORCE_DRIVER_MIB) * MIB,
        "PyTorch's 'total capacity of 23.69 GiB' on an RTX 3090, public logs"
        if measured
        else f"nvidia-smi's less the {GEFORCE_DRIVER_MIB} MiB an RTX 3090's driver keeps",
        bandwidth_gbs * 10**9,
        _tflops(bf16),
        None if fp8 is None else _tflops(fp8),
        source,
        cuda_memory_estimated=not measured,
    )


LOCAL_ACCELERATORS = (
    _local_gpu(
        "RTX3090",
        "NVIDIA GeForce RTX 3090 24GB",
        24_576,
        936,
        "71",
        None,
        "NVIDIA Ampere GA102 whitepaper: 936 GB/s, BF16 (FP32 accumulate) 71 TFLOPS dense, no FP8",
    ),
    _local_gpu(
        "RTX4090",
        "NVIDIA GeForce RTX 4090 24GB",
        24_564,
        1008,
        "165.2",
        "330.4",
        "NVIDIA Ada Lovelace whitepaper: 1,008 GB/s, BF16 165.2 TFLOPS dense (FP32 accumulate); FP8 twice that "
        "(the paper prints 330.3)",
    ),
    _local_gpu(
        "RTX5090",
        "NVIDIA GeForce RTX 5090 32GB",
        32_607,
        1792,
        "209.5",
        "419",
        "NVIDIA RTX Blackwell whitepaper: 1,792 GB/s, BF16 209.5 and FP8 419 TFLOPS dense (FP32 accumulate)",
    ),
    _local_gpu(
        "RTXA6000",
        "NVIDIA RTX A6000 48GB",
        49_140,
        768,
        "154.8",
        None,
        "NVIDIA RTX A6000 datasheet: 768 GB/s, BF16 309.7 TFLOPS with sparsity (154.8 dense), no FP8",
    ),
    _local_gpu(
        "RTX6000Ada",
        "NVIDIA RTX 6000 Ada Generation 48GB",
        49_140,
        960,
        "182.1",
        "364.2",
        "NVIDIA RTX 6000 Ada datasheet: 960 GB/s, BF16 364.2 and FP8 728.5 TFLOPS with sparsity, half dense",
    ),
    _local_gpu(
        "RTXPRO6000",
        "NVIDIA RTX PRO 6000 Blackwell 96GB",
        97_887,
        1792,
        "500",
        "1000",
        "NVIDIA RTX PRO 6000 Blackwell datasheet: 1,792 GB/s, FP4 4 PFLOPS with sparsity; FP8 and BF16 "
        "halved per step and dense (estimate)",
    ),
    _local_gpu(
        "A100-40GB",
        "NVIDIA A100 SXM4 40GB",
        40_960,
        1555,
        "312",
        None,
        "NVIDIA A100 datasheet: 1,555 GB/s (40GB), BF16 312 TFLOPS dense, no FP8",
    ),
    _local_gpu(
        "L40S",
        "NVIDIA L40S 48GB",
        46_068,
        864,
        "366.5",
        "733",
        "NVIDIA L40S datasheet: 864 GB/s, BF16 733 and FP8 1,466 TFLOPS with sparsity, half dense",
    ),
)
ACCELERATORS.update({gpu.name: gpu for gpu in LOCAL_ACCELERATORS})

# --- the accelerators of published runs ----------------------------------------------------------------

#: What nvidia-smi and CUDA report of an H100 SXM5 80GB: the part a Hopper driver keeps (469 MiB), used to
#: estimate the CUDA totals of the Hopper parts no public print gives.
H100_SMI_MIB = 81_559
HOPPER_DRIVER_MIB = H100_SMI_MIB - H100_CUDA_MIB
#: The same of a B200 (717 MiB), for the Blackwell parts.
BLACKWELL_DRIVER_MIB = B200_SMI_MIB - B200_CUDA_MIB
#: rocm-smi's VRAM total of an MI355X and an MI350X, 288 GiB less 16 MiB (public `rocm-smi --showmeminfo
#: vram --csv` output: 309,220,868,096 B), which HIP reports to a program too (MI300X's does, MI300X_MIB;
#: recorded device properties of both parts give total_memory 309,220,868,096).
MI350_MIB = 309_220_868_096 // MIB
#: CDNA 4's dense matrix FLOPs per compute unit per clock (AMD at ISSCC 2026: FP8 8,192, twice CDNA 3's
#: 4,096; BF16 half of FP8), and CDNA 3's: MI300X's 1,307.4 TFLOPS = 304 CUs × 2,048 × 2.1 GHz.
CDNA4_BF16_PER_CU, CDNA3_BF16_PER_CU = 4096, 2048


def _cdna(compute_units: int, ghz: str, per_cu: int) -> int:
    """Dense BF16 FLOP/s of an AMD Instinct part: CUs × FLOPs per CU per clock × its peak clock.

    >>> _cdna(304, "2.1", CDNA3_BF16_PER_CU) / 1e12  # MI300X: its datasheet's 1,307.4 TFLOPS
    1307.4432
    >>> _cdna(256, "2.4", CDNA4_BF16_PER_CU)  # MI355X: AMD's "2.5 PFLOPS" FP16/BF16
    2516582400000000
    """
    return int(compute_units * per_cu * Fraction(ghz) * 10**9)


def _estimated_cuda(smi_mib: int, driver_mib: int, like: str) -> tuple[int, str]:
    """A CUDA total no public print gives: the driver's total less what `like`'s driver keeps."""
    return (
        smi_mib - driver_mib
    ) * MIB, f"nvidia-smi's less the {driver_mib} MiB {like}'s driver keeps (an estimate)"


PUBLISHED_RUN_ACCELERATORS = (
    Accelerator(
        "MI355X",
        "AMD Instinct MI355X 288GB",
        MI350_MIB * MIB,
        "rocm-smi",
        MI350_MIB * MIB,
        "HIP's total, the same as rocm-smi's VRAM total (as on the MI300X; recorded device properties agree)",
        8_000 * 10**9,
        _cdna(256, "2.4", CDNA4_BF16_PER_CU),
        2 * _cdna(256, "2.4", CDNA4_BF16_PER_CU),
        "AMD MI355X: 288 GB HBM3E at 8 TB/s; dense peaks 256 CUs (ROCm GPU specifications) × 4,096 BF16 / "
        "8,192 FP8 FLOPs per CU per clock (ISSCC 2026) × 2.4 GHz (Hot Chips 2025): 2.5 and 5.0 PFLOPS",
        platform="rocm",
    ),
    Accelerator(
        "MI350X",
        "AMD Instinct MI350X 288GB",
        MI350_MIB * MIB,
        "rocm-smi",
        MI350_MIB * MIB,
        "HIP's total, the same as rocm-smi's VRAM total (recorded device properties: totalGlobalMem "
        "309,220,868,096)",
        8_000 * 10**9,
        _cdna(256, "2.2", CDNA4_BF16_PER_CU),
        2 * _cdna(256, "2.2", CDNA4_BF16_PER_CU),
        "AMD MI350X: 288 GB HBM3E at 8 TB/s; dense peaks as the MI355X's at its 2.2 GHz (Hot Chips 2025): "
        "2.3 and 4.6 PFLOPS",
        platform="rocm",
    ),
    Accelerator(
        "MI308X",
        "AMD Instinct MI308X 192GB",
        MI300X_MIB * MIB,
        "rocm-smi (assumed: the MI300X's 192 GB HBM3)",
        MI300X_MIB * MIB,
        "the MI300X's: same HBM3, HIP's total the same as rocm-smi's; no public MI308X print",
        5_300 * 10**9,
        _cdna(80, "2.1", CDNA3_BF16_PER_CU),
        2 * _cdna(80, "2.1", CDNA3_BF16_PER_CU),
        "AMD MI308X, an MI300X with 80 of its 304 CUs (gfx942): 5.3 TB/s; dense peaks 80 CUs × 2,048 BF16 / "
        "4,096 FP8 FLOPs per CU per clock × 2.1 GHz, derived (no datasheet found)",
        cuda_memory_estimated=True,
        platform="rocm",
    ),
    Accelerator(
        "B300",
        "NVIDIA B300 SXM6 AC (HGX, Blackwell Ultra) 288GB",
        275_040 * MIB,
        "nvidia-smi",
        *_estimated_cuda(275_040, BLACKWELL_DRIVER_MIB, "a B200"),
        8_000 * 10**9,
        _tflops("2250"),
        _tflops("4500"),
        "NVIDIA HGX B300, per GPU: 8 TB/s, BF16 4.5 and FP8 9 PFLOPS with sparsity (36 and 72 for 8 GPUs), "
        "half dense; nvidia-smi: 275,040 MiB",
        cuda_memory_estimated=True,
    ),
    Accelerator(
        "GB300",
        "NVIDIA GB300 NVL72, one Blackwell Ultra GPU 288GB",
        284_208 * MIB,
        "nvidia-smi",
        *_estimated_cuda(284_208, BLACKWELL_DRIVER_MIB, "a B200"),
        8_000 * 10**9,
        _tflops("2500"),
        _tflops("5000"),
        "NVIDIA GB300 NVL72 over its 72 GPUs: 576 TB/s of HBM and 360 PFLOPS dense FP8, so 8 TB/s and 5 "
        "PFLOPS each, BF16 half that; nvidia-smi: 284,208 MiB",
        cuda_memory_estimated=True,
    ),
    Accelerator(
        "GH200-96GB",
        "NVIDIA GH200 480GB (Grace Hopper, 96 GB HBM3)",
        97_871 * MIB,
        "nvidia-smi",
        97_285 * MIB,
        "the H20's 97,285 MiB: the same 96 GB of HBM3 under a Hopper driver (an estimate)",
        4_000 * 10**9,
        _tflops("989.5"),
        _tflops("1979"),
        "NVIDIA GH200 datasheet (96 GB HBM3): 4 TB/s, BF16 1,979 and FP8 3,958 TFLOPS with sparsity, half "
        "dense; nvidia-smi: 97,871 MiB",
        cuda_memory_estimated=True,
    ),
    Accelerator(
        "GH200-144GB",
        "NVIDIA GH200 144G HBM3e (Grace Hopper)",
        146_831 * MIB,
        "nvidia-smi",
        153_008_209_920,
        "torch.cuda.get_device_properties total_memory=153008209920, as a recorded GH200 144G HBM3e gives it "
        "(145,920 MiB)",
        4_900 * 10**9,
        _tflops("989.5"),
        _tflops("1979"),
        "NVIDIA GH200 datasheet (144 GB HBM3e): 4.9 TB/s, BF16 1,979 and FP8 3,958 TFLOPS with sparsity, "
        "half dense; nvidia-smi: 146,831 MiB",
    ),
    Accelerator(
        "H20-3e",
        "NVIDIA H20-3e 141GB",
        143_771 * MIB,
        "nvidia-smi",
        143_156 * MIB,
        "the H200's 143,156 MiB: the same 141 GB of HBM3e and nvidia-smi total (an estimate)",
        4_800 * 10**9,
        _tflops("148"),
        _tflops("296"),
        "NVIDIA H20-3e: the H20's tensor cores (BF16 148, FP8 296 TFLOPS dense) with the H200's 141 GB HBM3e; "
        "its 4.8 TB/s assumed (no datasheet found); nvidia-smi: 143,771 MiB",
        cuda_memory_estimated=True,
    ),
    Accelerator(
        "H100-NVL",
        "NVIDIA H100 NVL 94GB",
        95_830 * MIB,
        "nvidia-smi",
        *_estimated_cuda(95_830, HOPPER_DRIVER_MIB, "an H100 SXM5"),
        3_900 * 10**9,
        _tflops("835.5"),
        _tflops("1670.5"),
        "NVIDIA H100 datasheet (NVL, per GPU): 3.9 TB/s, BF16 1,671 and FP8 3,341 TFLOPS with sparsity, half "
        "dense; nvidia-smi: 95,830 MiB",
        cuda_memory_estimated=True,
    ),
    _local_gpu(
        "L40",
        "NVIDIA L40 48GB",
        46_068,
        864,
        "181.05",
        "362",
        "NVIDIA L40 datasheet: 864 GB/s, BF16 181.05 and FP8 362 TFLOPS dense (362.1 and 724 with sparsity); "
        "nvidia-smi: 46,068 MiB with ECC on",
    ),
    _local_gpu(
        "L20",
        "NVIDIA L20 48GB",
        46_068,
        864,
        "119.5",
        "239",
        "NVIDIA L20 as published (not on a datasheet found here): 864 GB/s, BF16 119.5 and FP8 239 TFLOPS "
        "dense; nvidia-smi: 46,068 MiB with ECC on",
    ),
    Accelerator(
        "DGX-Spark",
        "NVIDIA DGX Spark (GB10 Grace Blackwell, 128 GB unified LPDDR5X)",
        128_501_256_192,
        "the system's memory (sysinfo): nvidia-smi reports none on a GB10, [N/A] (NVIDIA's known issues)",
        128_501_256_192,
        "the system's memory, shared with the CPU: what a program gets of it depends on what else runs (an "
        "estimate)",
        273 * 10**9,
        _tflops("125"),
        _tflops("250"),
        "NVIDIA DGX Spark: 273 GB/s LPDDR5X, 1 PFLOPS FP4 with sparsity; FP8 and BF16 halved per step and "
        "dense (an estimate)",
        cuda_memory_estimated=True,
        unified_memory=True,
    ),
)
ACCELERATORS.update({gpu.name: gpu for gpu in PUBLISHED_RUN_ACCELERATORS})

#: Other spellings people type for the same parts.
_ALIASES = {
    "A100": "A100-80GB",
    "A100-SXM4-80GB": "A100-80GB",
    "A100-SXM": "A100-80GB",
    "A10080GB": "A100-80GB",
    "H100-SXM": "H100",
    "H100-SXM5": "H100",
    "H800-SXM": "H800",
    "H200-SXM": "H200",
    # the local table's cards, as people write them
    "3090": "RTX3090",
    "RTX-3090": "RTX3090",
    "4090": "RTX4090",
    "RTX-4090": "RTX4090",
    "5090": "RTX5090",
    "RTX-5090": "RTX5090",
    "A6000": "RTXA6000",
    "RTX-A6000": "RTXA6000",
    "6000ADA": "RTX6000Ada",
    "RTX-6000-ADA": "RTX6000Ada",
    "RTXPRO6000BLACKWELL": "RTXPRO6000",
    "RTX-PRO-6000": "RTXPRO6000",
    "A100-40G": "A100-40GB",
    # the names nvidia-smi, amd-smi / rocm-smi and torch print, and their short forms (NAMES normalizes
    # them first: upper case, runs of spaces and underscores as one dash, a leading NVIDIA or AMD [Instinct]
    # dropped)
    "H100-80GB": "H100",
    "H100-80GB-HBM3": "H100",
    "H100-SXM5-80GB": "H100",
    "H200-141GB": "H200",
    "H20-96GB": "H20",
    "B200-192GB": "B200",
    "MI300X-VF": "MI300X",
    "B300-SXM6-AC": "B300",
    "B300-288GB": "B300",
    "GB300-288GB": "GB300",
    "GH200": "GH200-96GB",
    "GH200-480GB": "GH200-96GB",
    "GH200-144G-HBM3E": "GH200-144GB",
    "GH200-144G": "GH200-144GB",
    "H20-3E-141GB": "H20-3e",
    "H100NVL": "H100-NVL",
    "RTX-PRO-6000-BLACKWELL-SERVER-EDITION": "RTXPRO6000",
    "RTX-PRO-6000-BLACKWELL-WORKSTATION-EDITION": "RTXPRO6000",
    "RTX-PRO-6000-BLACKWELL": "RTXPRO6000",
    "GB10": "DGX-Spark",
    "SPARK": "DGX-Spark",
    "DGXSPARK": "DGX-Spark",
}

_GPUS = re.compile(
    r"\s*(?P<count>\d{1,19})\s*(?:[x×*]\s*(?P<kind>[A-Za-z0-9_.-][A-Za-z0-9_. -]{0,80}))?\s*",
    re.IGNORECASE | re.ASCII,
)


def accelerator_key(name: str) -> str:
    """A name as the table looks it up: upper case, runs of spaces and underscores one dash, a leading
    NVIDIA or AMD [Instinct] dropped, as nvidia-smi and rocm-smi print them.

    >>> accelerator_key("NVIDIA H100 80GB HBM3"), accelerator_key("AMD Instinct MI355X"), accelerator_key("h200")
    ('H100-80GB-HBM3', 'MI355X', 'H200')
    """
    key = re.sub(r"[\s_]+", "-", name.strip().upper())
    for prefix in ("NVIDIA-", "AMD-INSTINCT-", "AMD-"):
        key = key.removeprefix(prefix)
    return key


def find_accelerator(name: str) -> Accelerator:
    """A table entry by name, case-insensitively, as people type it or the tools print it ('h200',
    'H100-SXM', 'A100', 'H100-80GB', 'NVIDIA H100 80GB HBM3', 'AMD Instinct MI355X')."""
    from kimicount.reading import shorten

    key = accelerator_key(name)
    by_key = {accelerator_key(n): n for n in ACCELERATORS}
    canonical = by_key.get(key) or _ALIASES.get(key)
    if canonical is None:
        raise UsageError(
            f"--gpus: unknown accelerator '{shorten(name, 40)}' (known: {', '.join(ACCELERATORS)}; "
            "for another one give --gpus N with --gpu-memory SIZE)"
        )
    return ACCELERATORS[canonical]


#: NODES×N×TYPE: N GPUs of a type in each of NODES nodes (2x8xH800).
_NODES = re.compile(
    r"\s*(?P<nodes>\d{1,19})\s*[x×*]\s*(?P<count>\d{1,19})\s*[x×*]\s*(?P<kind>[A-Za-z][A-Za-z0-9_. -]{0,80})\s*",
    re.IGNORECASE,
)


def parse_gpu_nodes(text: str) -> tuple[int, int, Accelerator | None]:
    """(nodes, GPUs in all, the table's entry): `2x8xH800` is 16 H800 in 2 nodes of 8; `8xH200` and a
    bare `8` are one node.

    >>> nodes, count, gpu = parse_gpu_nodes("2x8xH800")
    >>> nodes, count, gpu.name
    (2, 16, 'H800')
    """
    match = _NODES.fullmatch(text)
    if match is None:
        return (1, *parse_gpus(text))
    nodes, per_node = int(match["nodes"]), int(match["count"])
    if not (1 <= nodes <= MAX_COUNT and 1 <= per_node <= MAX_COUNT and nodes * per_node <= MAX_COUNT):
        raise UsageError(f"--gpus '{text}': expected at least 1 node of at least 1 GPU")
    return nodes, nodes * per_node, find_accelerator(match["kind"])


def parse_gpus(text: str) -> tuple[int, Accelerator | None]:
    """`N×TYPE` (8xH200, 8×H200, 16xH100) -> (N, the table's entry); a bare `N` -> (N, None), for a
    GPU described by --gpu-memory and the other overrides; `NODES×N×TYPE` -> (NODES × N, the entry)."""
    if _NODES.fullmatch(text):
        _, count, gpu = parse_gpu_nodes(text)
        return count, gpu
    match = _GPUS.fullmatch(text)
    if match is None:
        raise UsageError(
            f"--gpus '{text}': expected a count and a type such as 8xH200, 8×H200, 16xH100 or 2x8xH800 "
            f"(types: {', '.join(ACCELERATORS)})"
        )
    count = int(match["count"])
    if count < 1:
        raise UsageError(f"--gpus '{text}': expected at least 1 GPU")
    if count > MAX_COUNT:
        raise UsageError(f"--gpus '{text}': expected at most {MAX_COUNT:,} GPUs (2^63 − 1)")
    return count, None if match["kind"] is None else find_accelerator(match["kind"])


#: Where a memory given by --gpu-memory comes from, as the plan prints it.
GIVEN_MEMORY = "--gpu-memory"
GIVEN_CUDA_MEMORY = "--gpu-memory, taken as the total CUDA reports"


def custom_accelerator(memory_bytes: int) -> Accelerator:
    """A GPU known only by its memory (--gpus N --gpu-memory SIZE): no bandwidth or FLOP/s until given."""
    return Accelerator(
        name="GPU",
        description="a GPU given by --gpu-memory",
        memory_bytes=memory_bytes,
        memory_source=GIVEN_MEMORY,
        cuda_memory_bytes=memory_bytes,
        cuda_memory_source=GIVEN_CUDA_MEMORY,
        hbm_bandwidth=0,
        bf16_flops=0,
        fp8_flops=None,
        source="--gpu-memory",
        overridden=("memory",),
    )


def with_overrides(
    gpu: Accelerator,
    *,
    memory_bytes: int | None = None,
    hbm_bandwidth: int | None = None,
    bf16_flops: int | None = None,
    fp8_flops: int | None = None,
) -> Accelerator:
    """The entry with the user's figures in place of the table's; `overridden` says which. A memory
    given replaces both totals: the engine is then sized against it.

    >>> gpu = with_overrides(ACCELERATORS["H200"], memory_bytes=141 * 2**30)
    >>> gpu.cuda_memory_bytes == gpu.memory_bytes == 141 * 2**30, gpu.memory_source, gpu.overridden
    (True, '--gpu-memory', ('memory',))
    """
    given = {
        key
        for key, value in (
            ("memory_bytes", memory_bytes),
            ("hbm_bandwidth", hbm_bandwidth),
            ("bf16_flops", bf16_flops),
            ("fp8_flops", fp8_flops),
        )
        if value is not None
    }
    if not given:
        return gpu
    named = tuple(
        dict.fromkeys(gpu.overridden + tuple(key.split("_")[0] for key in sorted(given, key=_ORDER.index)))
    )
    if memory_bytes is not None:
        gpu = replace(
            gpu,
            memory_bytes=memory_bytes,
            memory_source=GIVEN_MEMORY,
            cuda_memory_bytes=memory_bytes,
            cuda_memory_source=GIVEN_CUDA_MEMORY,
            cuda_memory_estimated=False,
        )
    if hbm_bandwidth is not None:
        gpu = replace(gpu, hbm_bandwidth=hbm_bandwidth)
    if bf16_flops is not None:
        gpu = replace(gpu, bf16_flops=bf16_flops)
    if fp8_flops is not None:
        gpu = replace(gpu, fp8_flops=fp8_flops)
    return replace(gpu, overridden=named)


#: The figures a user may replace, in the order `overridden` names them.
_ORDER = ("memory_bytes", "hbm_bandwidth", "bf16_flops", "fp8_flops")


# --- rates typed by the user -----------------------------------------------------------------------

_RATE = re.compile(r"(?P<number>\d{1,100}(?:\.\d{0,100})?(?:e\d{1,2})?)\s*(?P<unit>[a-z/]*)", re.IGNORECASE)
_BANDWIDTH_UNITS = {"b/s": 1, "kb/s": 10**3, "mb/s": 10**6, "gb/s": 10**9, "tb/s": 10**12, "": 1}
_FLOPS_UNITS = {"flops": 1, "gflops": 10**9, "tflops": 10**12, "pflops": 10**15, "": 1}


def _parse_rate(option: str, text: str, units: dict[str, int], example: str) -> int:
    match = _RATE.fullmatch(text.strip())
    unit = units.get(match["unit"].lower()) if match else None
    if match is None or unit is None:
        raise UsageError(f"{option} '{text}': expected a rate such as {example}")
    value = math.floor(Fraction(match["number"]) * unit)
    if value < 1:
        raise UsageError(f"{option} '{text}': expected a positive rate")
    return value


def parse_bandwidth(text: str, option: str = "--hbm-bandwidth") -> int:
    """Bytes per second from '4.8TB/s', '3350 GB/s' or a plain number. [bytes/s]

    >>> parse_bandwidth("4.8TB/s"), parse_bandwidth("3350 GB/s")
    (4800000000000, 3350000000000)
    """
    return _parse_rate(option, text, _BANDWIDTH_UNITS, "4.8TB/s, 3350GB/s or a number of bytes per second")


def parse_flops(text: str, option: str) -> int:
    """FLOP/s from '989.5TFLOPS', '2.25PFLOPS' or a plain number. [FLOP/s]

    >>> parse_flops("989.5TFLOPS", "--peak-bf16"), parse_flops("2.25 PFLOPS", "--peak-fp8")
    (989500000000000, 2250000000000000)
    """
    return _parse_rate(option, text, _FLOPS_UNITS, "989.5TFLOPS, 2.25PFLOPS or a number of FLOP/s")


def typed_gpu(
    gpus: str,
    count: int,
    gpu: Accelerator | None,
    *,
    gpu_memory: str | None,
    hbm_bandwidth: str | None,
    peak_bf16: str | None,
    peak_fp8: str | None = None,
    example: str = "H200",
) -> Accelerator:
    """The GPU the options describe: `gpu`, the table's entry --gpus named (None for a bare count, then
    one known by --gpu-memory alone), with --gpu-memory, --hbm-bandwidth, --peak-bf16 and --peak-fp8
    in place of its figures. `example`: the type the message for a bare count suggests.

    >>> typed_gpu("8", 8, None, gpu_memory="80GiB", hbm_bandwidth="2TB/s", peak_bf16=None).hbm_bandwidth
    2000000000000
    """
    memory = None if gpu_memory is None else parse_size(gpu_memory, "--gpu-memory")
    if gpu is None:
        if memory is None:
            raise UsageError(
                f"--gpus {gpus}: name the GPU type (e.g. {count}x{example}) or give --gpu-memory SIZE"
            )
        gpu = custom_accelerator(memory)
    return with_overrides(
        gpu,
        memory_bytes=memory,
        hbm_bandwidth=None if hbm_bandwidth is None else parse_bandwidth(hbm_bandwidth),
        bf16_flops=None if peak_bf16 is None else parse_flops(peak_bf16, "--peak-bf16"),
        fp8_flops=None if peak_fp8 is None else parse_flops(peak_fp8, "--peak-fp8"),
    )
