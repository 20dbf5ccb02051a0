package io.kvpool.cuda;

import jcuda.NativePointerObject;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.reflect.Method;
import java.util.Optional;

/**
 * {@code cuMemcpyBatchAsync} (CUDA 12.8+), which JCuda 12.0.0 does not bind, called through a Panama
 * downcall into the driver ({@code libcuda.so.1}, looked up at first use): many pointer-to-pointer copies
 * in ONE driver call. Used by {@link OffloadEngine#MEMCPY_BATCH}.
 *
 * <h2>ABI (checked against {@code cuda.h} by {@code MemcpyBatchAbiTest} where the header is installed)</h2>
 * CUDA 13's {@code cuda.h} {@code #define}s {@code cuMemcpyBatchAsync} to the exported symbol
 * {@value #SYMBOL_V2}; the CUDA 12.8/12.9 symbol {@value #SYMBOL_V1} takes one more argument
 * ({@code failIdx}). The first found is used:
 * <pre>
 *   CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
 *                                  CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream)
 *   CUresult cuMemcpyBatchAsync   (CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
 *                                  CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
 *                                  size_t* failIdx, CUstream hStream)
 *
 *   CUmemcpyAttributes, 24 bytes, 4-aligned:                 CUmemLocation, 8 bytes:
 *   ┌────┬──────────────────────────────────────────┐        ┌───┬─────────────────────────┐
 *   │  0 │ i32 srcAccessOrder (1 = STREAM)           │        │ 0 │ i32 type (0 = none)     │
 *   │  4 │ CUmemLocation srcLocHint                  │        │ 4 │ i32 id                  │
 *   │ 12 │ CUmemLocation dstLocHint                  │        └───┴─────────────────────────┘
 *   │ 20 │ u32 flags (0 = default)                   │
 *   └────┴──────────────────────────────────────────┘
 * </pre>
 * One attribute entry ({@code attrsIdxs = {0}}) covers every copy: source accessed in stream order,
 * no location hints (they apply to managed memory only), no flags. The copy descriptors are read during
 * the call, so they live in a confined arena closed when it returns. The stream must not be the legacy
 * NULL stream (the driver refuses it).
 */
final class MemcpyBatch {

    private MemcpyBatch() {
    }

    /** The CUDA 13 symbol. */
    static final String SYMBOL_V2 = "cuMemcpyBatchAsync_v2";
    /** The CUDA 12.8/12.9 symbol (with {@code failIdx}). */
    static final String SYMBOL_V1 = "cuMemcpyBatchAsync";
    /** {@code CU_MEMCPY_SRC_ACCESS_ORDER_STREAM}. */
    static final int SRC_ACCESS_ORDER_STREAM = 1;

    /** {@code CUmemLocation}. */
    static final StructLayout LOCATION = MemoryLayout.structLayout(
        ValueLayout.JAVA_INT.withName("type"),
        ValueLayout.JAVA_INT.withName("id")).withName("CUmemLocation");

    /** {@code CUmemcpyAttributes}. */
    static final StructLayout ATTRIBUTES = MemoryLayout.structLayout(
        ValueLayout.JAVA_INT.withName("srcAccessOrder"),
        LOCATION.withName("srcLocHint"),
        LOCATION.withName("dstLocHint"),
        ValueLayout.JAVA_INT.withName("flags")).withName("CUmemcpyAttributes");

    /** {@value #SYMBOL_V2}'s signature. */
    static final FunctionDescriptor V2 = FunctionDescriptor.of(ValueLayout.JAVA_INT,
        ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG,
        ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.ADDRESS);
    /** {@value #SYMBOL_V1}'s signature. */
    static final FunctionDescriptor V1 = FunctionDescriptor.of(ValueLayout.JAVA_INT,
        ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG,
        ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.ADDRESS, ValueLayout.ADDRESS);

    /** The downcall, bound at first use. */
    @SuppressWarnings("restricted") // binding a native function is this class's job; the module needs native access
    private static final class Bound {
        static final String SYMBOL;
        static final MethodHandle HANDLE; // null with SYMBOL holding the reason when unavailable
        static final boolean WITH_FAIL_INDEX;

        static {
            String symbol;
            MethodHandle handle = null;
            boolean v1 = false;
            try {
                final SymbolLookup cuda = SymbolLookup.libraryLookup("libcuda.so.1", Arena.global());
                final Optional<MemorySegment> s2 = cuda.find(SYMBOL_V2);
                final Optional<MemorySegment> s1 = cuda.find(SYMBOL_V1);
                if (s2.isPresent()) {
                    symbol = SYMBOL_V2;
                    handle = Linker.nativeLinker().downcallHandle(s2.get(), V2);
                } else if (s1.isPresent()) {
                    symbol = SYMBOL_V1;
                    v1 = true;
                    handle = Linker.nativeLinker().downcallHandle(s1.get(), V1);
                } else {
                    symbol = "libcuda.so.1 exports neither " + SYMBOL_V2 + " nor " + SYMBOL_V1 + " (a driver older than CUDA 12.8)";
                }
            } catch (IllegalArgumentException | IllegalCallerException e) {
                symbol = "cannot bind cuMemcpyBatchAsync: " + e.getMessage();
            }
            SYMBOL = symbol;
            HANDLE = handle;
            WITH_FAIL_INDEX = v1;
        }
    }

    /** @return the symbol in use, or why none can be */
    static String symbol() {
        return Bound.SYMBOL;
    }

    /** @return whether the driver has {@code cuMemcpyBatchAsync} ({@link #copy} throws otherwise) */
    static boolean available() {
        return Bound.HANDLE != null;
    }

    private static final MethodHandle NATIVE_POINTER;

    static {
        try {
            final Method m = NativePointerObject.class.getDeclaredMethod("getNativePointer");
            m.setAccessible(true); // JCuda keeps a stream's handle protected; both sit in unnamed or automatic modules
            NATIVE_POINTER = MethodHandles.lookup().unreflect(m);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** @return the native handle of a JCuda object ({@code 0} for {@code null}) */
    static long nativePointer(NativePointerObject o) {
        if (o == null) {
            return 0;
        }
        try {
            return (long) NATIVE_POINTER.invoke(o);
        } catch (Throwable t) {
            throw new IllegalStateException("cannot read the native handle of " + o, t);
        }
    }

    /**
     * Enqueues {@code count} copies {@code dsts[i] ← srcs[i]} of {@code bytes} bytes each, as one batch on
     * {@code stream}, and returns without waiting.
     *
     * @param stream a stream handle, not the legacy NULL stream (0 or {@code CU_STREAM_LEGACY} = 1)
     * @return the {@code CUresult}
     * @throws UnsupportedOperationException if the driver has no {@code cuMemcpyBatchAsync}
     */
    static int copy(long[] dsts, long[] srcs, int count, long bytes, long stream) {
        if (Bound.HANDLE == null) {
            throw new UnsupportedOperationException(Bound.SYMBOL);
        }
        if (stream == 0 || stream == 1) {
            throw new IllegalArgumentException("cuMemcpyBatchAsync cannot use the legacy NULL stream; pass a stream of your own");
        }
        try (Arena a = Arena.ofConfined()) {
            final MemorySegment d = a.allocate(ValueLayout.JAVA_LONG, Math.max(1, count));
            final MemorySegment s = a.allocate(ValueLayout.JAVA_LONG, Math.max(1, count));
            final MemorySegment sizes = a.allocate(ValueLayout.JAVA_LONG, Math.max(1, count));
            MemorySegment.copy(dsts, 0, d, ValueLayout.JAVA_LONG, 0, count);
            MemorySegment.copy(srcs, 0, s, ValueLayout.JAVA_LONG, 0, count);
            for (int i = 0; i < count; i++) {
                sizes.setAtIndex(ValueLayout.JAVA_LONG, i, bytes);
            }
            final MemorySegment attrs = a.allocate(ATTRIBUTES); // zeroed: no hints, no flags
            attrs.set(ValueLayout.JAVA_INT, ATTRIBUTES.byteOffset(MemoryLayout.PathElement.groupElement("srcAccessOrder")),
                SRC_ACCESS_ORDER_STREAM);
            final MemorySegment attrsIdxs = a.allocate(ValueLayout.JAVA_LONG); // {0}
            final MemorySegment streamHandle = MemorySegment.ofAddress(stream);
            if (Bound.WITH_FAIL_INDEX) {
                final MemorySegment failIdx = a.allocate(ValueLayout.JAVA_LONG);
                return (int) Bound.HANDLE.invokeExact(d, s, sizes, (long) count, attrs, attrsIdxs, 1L, failIdx, streamHandle);
            }
            return (int) Bound.HANDLE.invokeExact(d, s, sizes, (long) count, attrs, attrsIdxs, 1L, streamHandle);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(Bound.SYMBOL + " downcall failed", t);
        }
    }
}
