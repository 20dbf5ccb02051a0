/**
 * kvpool on NVIDIA GPUs: device page storage, batched copy and checksum kernels, host offload, and a
 * CUDA IPC transport between processes on one machine. Needs {@code --enable-native-access} for JCuda.
 */
@SuppressWarnings({"requires-automatic", "requires-transitive-automatic"}) // jcuda is an automatic module (no descriptor)
module io.kvpool.cuda {
    requires transitive io.kvpool;
    requires transitive io.kvpool.transfer;
    requires transitive jcuda; // DevicePageStorage's submit* methods take JCuda's CUstream


    exports io.kvpool.cuda;
    exports io.kvpool.cuda.ipc;
}
