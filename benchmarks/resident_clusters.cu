// How many thread-block clusters of each size the GPU keeps resident at once, one CTA an SM (as the
// wavefront's CTAs): the `resident_clusters` of persist_rnn/schedule/calibration/<arch>.json.
//   nvcc -arch=sm_90 -o /tmp/resident_clusters benchmarks/resident_clusters.cu && /tmp/resident_clusters
#include <cstdio>
#include <cuda_runtime.h>
__global__ void k(float* p) { extern __shared__ float s[]; s[threadIdx.x] = 1; if (p) p[threadIdx.x] = s[threadIdx.x]; }
int main() {
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  for (int c : {2, 4, 8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(c * 16); cfg.blockDim = dim3(288); cfg.dynamicSmemBytes = 200 * 1024;
    cudaLaunchAttribute a; a.id = cudaLaunchAttributeClusterDimension; a.val.clusterDim.x = c; a.val.clusterDim.y = 1; a.val.clusterDim.z = 1;
    cfg.attrs = &a; cfg.numAttrs = 1;
    int n = -1; cudaError_t e = cudaOccupancyMaxActiveClusters(&n, k, &cfg);
    printf("cluster %d: %d resident clusters (%s)\n", c, n, cudaGetErrorString(e));
  }
}
