/* streamsafe._native: the hot path's driver calls and DLPack reads, as plain C calls.
 *
 * The same work as streamsafe/backend/_held.py (driver entry points called through ctypes, with the
 * GIL kept) and streamsafe/_dlpack.py (a capsule's DLTensor read in place), without ctypes' per-call
 * cost: a call here is a vectorcall of a C function that converts its int arguments and calls the
 * driver's entry point. The entry points are the driver's own, found by the Python side
 * (cuGetProcAddress through cuda.bindings) and handed to bind(); nothing here loads a library.
 *
 * Nothing here blocks the host or releases the GIL: every driver call is an enqueue (an event
 * record, a stream wait, a graph or kernel launch) or a read of the current context. Each returns
 * the driver's CUresult as an int (0: success), as the ctypes calls do.
 *
 * Optional: when it cannot be built, streamsafe uses the ctypes calls instead (the same calls, in
 * the same order). STREAMSAFE_NATIVE=0 makes streamsafe ignore it (the benchmarks' switch).
 * The module also holds the steady-state frame (streamsafe/_replay.c), registered below.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_replay.h"

typedef int (*record_fn)(void *event, void *stream);
typedef int (*wait_fn)(void *stream, void *event, unsigned int flags);
typedef int (*ctx_current_fn)(void **ctx);
typedef int (*graph_launch_fn)(void *exec, void *stream);
typedef int (*launch_kernel_fn)(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                unsigned int by, unsigned int bz, unsigned int shared, void *stream, void **params,
                                void **extra);

static record_fn p_record = NULL;
static wait_fn p_wait = NULL;
static ctx_current_fn p_ctx_current = NULL;
static graph_launch_fn p_graph_launch = NULL;
static launch_kernel_fn p_launch_kernel = NULL;

/* ---- argument helpers ----------------------------------------------------------------------- */

static int as_pointer(PyObject *obj, void **out) {
    /* An int handle or address (0 .. 2**64 - 1; a negative int is taken modulo 2**64 as C would). */
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "streamsafe._native: a handle must be an int, not %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLongMask(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *out = (void *)(uintptr_t)v;
    return 0;
}

static int as_uint(PyObject *obj, unsigned int *out) {
    unsigned long v = PyLong_AsUnsignedLong(obj);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (v > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "streamsafe._native: a launch dimension or flags value must fit 32 bits");
        return -1;
    }
    *out = (unsigned int)v;
    return 0;
}

static int check_args(Py_ssize_t nargs, Py_ssize_t want, const char *name) {
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "streamsafe._native.%s takes %zd arguments (%zd given)", name, want, nargs);
        return -1;
    }
    return 0;
}

static int require_bound(void *fn, const char *name) {
    if (fn == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "streamsafe._native.%s: no driver entry point bound; call bind() first "
                     "(streamsafe.backend._held does, when the CUDA driver is present)", name);
        return -1;
    }
    return 0;
}

/* ---- bind ----------------------------------------------------------------------------------- */

PyDoc_STRVAR(bind_doc,
"bind(cuEventRecord, cuStreamWaitEvent, cuCtxGetCurrent, cuGraphLaunch, cuLaunchKernel) -> None\n\n"
"Use these entry points (addresses, as ints; 0 unbinds one) for the calls below. Process-wide.");

static PyObject *native_bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *p[5];
    if (check_args(nargs, 5, "bind")) return NULL;
    for (int i = 0; i < 5; i++)
        if (as_pointer(args[i], &p[i])) return NULL;
    p_record = (record_fn)p[0];
    p_wait = (wait_fn)p[1];
    p_ctx_current = (ctx_current_fn)p[2];
    p_graph_launch = (graph_launch_fn)p[3];
    p_launch_kernel = (launch_kernel_fn)p[4];
    Py_RETURN_NONE;
}

PyDoc_STRVAR(bound_doc, "bound() -> tuple[int, ...]: the entry points bind() set, in its order (0: none).");

static PyObject *native_bound(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args(nargs, 0, "bound")) return NULL;
    return Py_BuildValue("(KKKKK)", (unsigned long long)(uintptr_t)p_record, (unsigned long long)(uintptr_t)p_wait,
                         (unsigned long long)(uintptr_t)p_ctx_current, (unsigned long long)(uintptr_t)p_graph_launch,
                         (unsigned long long)(uintptr_t)p_launch_kernel);
}

/* ---- single driver calls -------------------------------------------------------------------- */

PyDoc_STRVAR(event_record_doc, "event_record(event, stream) -> CUresult: cuEventRecord. Does not block.");

static PyObject *native_event_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *event, *stream;
    if (check_args(nargs, 2, "event_record") || require_bound((void *)p_record, "event_record")) return NULL;
    if (as_pointer(args[0], &event) || as_pointer(args[1], &stream)) return NULL;
    return PyLong_FromLong(p_record(event, stream));
}

PyDoc_STRVAR(stream_wait_event_doc,
"stream_wait_event(stream, event, flags) -> CUresult: cuStreamWaitEvent. Does not block the host.");

static PyObject *native_stream_wait_event(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *stream, *event;
    unsigned int flags;
    if (check_args(nargs, 3, "stream_wait_event") || require_bound((void *)p_wait, "stream_wait_event")) return NULL;
    if (as_pointer(args[0], &stream) || as_pointer(args[1], &event) || as_uint(args[2], &flags)) return NULL;
    return PyLong_FromLong(p_wait(stream, event, flags));
}

PyDoc_STRVAR(ctx_current_doc,
"ctx_current() -> int | None: cuCtxGetCurrent's context as an int (0: none); None when the call fails.");

static PyObject *native_ctx_current(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *ctx = NULL;
    if (check_args(nargs, 0, "ctx_current") || require_bound((void *)p_ctx_current, "ctx_current")) return NULL;
    if (p_ctx_current(&ctx) != 0) Py_RETURN_NONE;
    return PyLong_FromVoidPtr(ctx);
}

PyDoc_STRVAR(graph_launch_doc, "graph_launch(exec, stream) -> CUresult: cuGraphLaunch. Does not block.");

static PyObject *native_graph_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *exec, *stream;
    if (check_args(nargs, 2, "graph_launch") || require_bound((void *)p_graph_launch, "graph_launch")) return NULL;
    if (as_pointer(args[0], &exec) || as_pointer(args[1], &stream)) return NULL;
    return PyLong_FromLong(p_graph_launch(exec, stream));
}

PyDoc_STRVAR(launch_copy_doc,
"launch_copy(function, blocks, threads, src, dst, nbytes, stream[, src1, dst1, nbytes1]) -> CUresult\n\n"
"cuLaunchKernel of a copy kernel taking (src, dst, nbytes) as three 64-bit arguments, on a 1-D grid;\n"
"with a second triple, of a kernel taking both triples (six arguments) on a grid of ``blocks`` x 2,\n"
"row y copying pair y. The driver copies the arguments during the call. Does not block.");

static PyObject *native_launch_copy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *function, *stream, *v[6];
    unsigned int blocks, threads;
    if (nargs != 7 && nargs != 10) {
        PyErr_Format(PyExc_TypeError, "streamsafe._native.launch_copy takes 7 or 10 arguments (%zd given)", nargs);
        return NULL;
    }
    if (require_bound((void *)p_launch_kernel, "launch_copy")) return NULL;
    if (as_pointer(args[0], &function) || as_uint(args[1], &blocks) || as_uint(args[2], &threads) ||
        as_pointer(args[3], &v[0]) || as_pointer(args[4], &v[1]) || as_pointer(args[5], &v[2]) ||
        as_pointer(args[6], &stream))
        return NULL;
    unsigned int pairs = nargs == 10 ? 2 : 1;
    if (pairs == 2 && (as_pointer(args[7], &v[3]) || as_pointer(args[8], &v[4]) || as_pointer(args[9], &v[5]))) return NULL;
    uint64_t values[6];
    void *params[6];
    for (unsigned int i = 0; i < 3 * pairs; i++) {
        values[i] = (uint64_t)(uintptr_t)v[i];
        params[i] = &values[i];
    }
    return PyLong_FromLong(p_launch_kernel(function, blocks, pairs, 1, threads, 1, 1, 0, stream, params, NULL));
}

/* ---- fence programs ------------------------------------------------------------------------- */

PyDoc_STRVAR(run_fences_doc,
"run_fences(steps) -> None | tuple[int, int]\n\n"
"Issue a bound fence program: ``steps`` is a tuple of ints, three per step: (0, event, stream) is\n"
"cuEventRecord(event, stream); (1, stream, event) is cuStreamWaitEvent(stream, event, 0). Stops at\n"
"the first failure and returns (step index, CUresult); None when every step succeeded.\n"
"Does not block the host.");

static PyObject *native_run_fences(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args(nargs, 1, "run_fences") || require_bound((void *)p_record, "run_fences") ||
        require_bound((void *)p_wait, "run_fences"))
        return NULL;
    PyObject *steps = args[0];
    if (!PyTuple_CheckExact(steps) || PyTuple_GET_SIZE(steps) % 3 != 0) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.run_fences: steps must be a tuple of ints, three per step");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(steps) / 3;
    /* the whole program is checked before its first step is issued: a malformed one issues nothing */
    for (Py_ssize_t i = 0; i < n; i++) {
        void *op, *a, *b;
        if (as_pointer(PyTuple_GET_ITEM(steps, 3 * i), &op) || as_pointer(PyTuple_GET_ITEM(steps, 3 * i + 1), &a) ||
            as_pointer(PyTuple_GET_ITEM(steps, 3 * i + 2), &b))
            return NULL;
        if (op != (void *)0 && op != (void *)1) {
            PyErr_Format(PyExc_ValueError, "streamsafe._native.run_fences: step %zd has op %zu (0: record, 1: wait)", i,
                         (size_t)(uintptr_t)op);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        void *op, *a, *b;
        as_pointer(PyTuple_GET_ITEM(steps, 3 * i), &op); /* (checked above: these cannot fail) */
        as_pointer(PyTuple_GET_ITEM(steps, 3 * i + 1), &a);
        as_pointer(PyTuple_GET_ITEM(steps, 3 * i + 2), &b);
        int err = op == (void *)0 ? p_record(a, b) : p_wait(a, b, 0);
        if (err != 0) return Py_BuildValue("(ni)", i, err);
    }
    Py_RETURN_NONE;
}

/* A bound program's steps, for the C replay (streamsafe/_replay.c): run_fences(steps) when `ctx` (0: any) is the
 * current context, else Py_NotImplemented (new reference: the caller runs the program's Python call instead,
 * which makes that context current first). */
PyObject *run_fence_steps(PyObject *steps, PyObject *ctx) {
    void *want = NULL, *now = NULL;
    if (as_pointer(ctx, &want)) return NULL;
    if (want != NULL && (p_ctx_current == NULL || p_ctx_current(&now) != 0 || now != want)) Py_RETURN_NOTIMPLEMENTED;
    PyObject *argv[1] = {steps};
    return native_run_fences(NULL, argv, 1);
}

/* ---- DLPack capsules ------------------------------------------------------------------------ */

typedef struct {
    void *data;
    int32_t device_type;
    int32_t device_id;
    int32_t ndim;
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensorLayout;

/* DLManagedTensorVersioned: version (8 bytes), manager_ctx, deleter, flags, then the DLTensor. */
#define VERSIONED_OFFSET 32

static DLTensorLayout *dltensor_of(PyObject *capsule) {
    /* The DLTensor of an unconsumed "dltensor" or "dltensor_versioned" capsule; NULL (no error set)
       for anything else. Neither consumes nor renames the capsule. */
    if (!PyCapsule_CheckExact(capsule)) return NULL;
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL) {
        PyErr_Clear();
        return NULL;
    }
    size_t offset;
    if (strcmp(name, "dltensor") == 0)
        offset = 0;
    else if (strcmp(name, "dltensor_versioned") == 0)
        offset = VERSIONED_OFFSET;
    else
        return NULL;
    char *ptr = (char *)PyCapsule_GetPointer(capsule, name);
    if (ptr == NULL) {
        PyErr_Clear();
        return NULL;
    }
    /* DLPack: a consumer must not read a versioned tensor of a major version it does not know (1) */
    if (offset && *(uint32_t *)ptr != 1) return NULL;
    return (DLTensorLayout *)(ptr + offset);
}

PyDoc_STRVAR(capsule_data_doc,
"capsule_data(capsule) -> int | None: the data pointer of an unconsumed dltensor(_versioned) capsule,\n"
"read in place; None for anything else, and for a NULL data pointer.");

PyObject *native_capsule_data(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args(nargs, 1, "capsule_data")) return NULL;
    DLTensorLayout *t = dltensor_of(args[0]);
    if (t == NULL) Py_RETURN_NONE;
    if (t->data == NULL) Py_RETURN_NONE; /* (as ctypes reads a NULL pointer) */
    return PyLong_FromVoidPtr(t->data);
}

static PyObject *int64_tuple(const int64_t *values, int32_t n) {
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (int32_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

PyDoc_STRVAR(read_capsule_doc,
"read_capsule(capsule) -> tuple | None\n\n"
"(data + byte_offset, device_type, device_id, shape, strides or None, code, bits, lanes) of an unconsumed\n"
"dltensor(_versioned) capsule, read in place (neither consumed nor renamed); None for anything else\n"
"or for a malformed tensor (ndim outside 0..64, or no shape).");

static PyObject *native_read_capsule(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_args(nargs, 1, "read_capsule")) return NULL;
    DLTensorLayout *t = dltensor_of(args[0]);
    if (t == NULL || t->ndim < 0 || t->ndim > 64 || (t->ndim && t->shape == NULL)) Py_RETURN_NONE;
    PyObject *shape = int64_tuple(t->shape, t->ndim);
    if (shape == NULL) return NULL;
    PyObject *strides;
    if (t->ndim && t->strides != NULL) {
        strides = int64_tuple(t->strides, t->ndim);
        if (strides == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
    } else {
        strides = Py_None;
        Py_INCREF(strides);
    }
    unsigned long long ptr = (unsigned long long)(uintptr_t)t->data + t->byte_offset;
    return Py_BuildValue("(KiiNNiii)", ptr, (int)t->device_type, (int)t->device_id, shape, strides, (int)t->code,
                         (int)t->bits, (int)t->lanes);
}

/* ---- module --------------------------------------------------------------------------------- */

static PyMethodDef native_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))native_bind, METH_FASTCALL, bind_doc},
    {"bound", (PyCFunction)(void (*)(void))native_bound, METH_FASTCALL, bound_doc},
    {"event_record", (PyCFunction)(void (*)(void))native_event_record, METH_FASTCALL, event_record_doc},
    {"stream_wait_event", (PyCFunction)(void (*)(void))native_stream_wait_event, METH_FASTCALL, stream_wait_event_doc},
    {"ctx_current", (PyCFunction)(void (*)(void))native_ctx_current, METH_FASTCALL, ctx_current_doc},
    {"graph_launch", (PyCFunction)(void (*)(void))native_graph_launch, METH_FASTCALL, graph_launch_doc},
    {"launch_copy", (PyCFunction)(void (*)(void))native_launch_copy, METH_FASTCALL, launch_copy_doc},
    {"run_fences", (PyCFunction)(void (*)(void))native_run_fences, METH_FASTCALL, run_fences_doc},
    {"capsule_data", (PyCFunction)(void (*)(void))native_capsule_data, METH_FASTCALL, capsule_data_doc},
    {"read_capsule", (PyCFunction)(void (*)(void))native_read_capsule, METH_FASTCALL, read_capsule_doc},
    {"bind_replay", (PyCFunction)(void (*)(void))native_bind_replay, METH_FASTCALL, bind_replay_doc},
    {"replay", (PyCFunction)(void (*)(void))native_replay, METH_FASTCALL, replay_doc},
    {"import_output", (PyCFunction)(void (*)(void))native_import_output, METH_FASTCALL, import_output_doc},
    {"bind_occupancy", (PyCFunction)(void (*)(void))native_bind_occupancy, METH_FASTCALL, bind_occupancy_doc},
    {"note_run", (PyCFunction)(void (*)(void))native_note_run, METH_FASTCALL, note_run_doc},
#ifdef STREAMSAFE_FRAME_PROFILE
    {"frame_profile", (PyCFunction)(void (*)(void))native_frame_profile, METH_FASTCALL, frame_profile_doc},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "streamsafe._native",
    "The hot path's driver calls and DLPack reads in C (optional; see streamsafe/backend/_held.py).", -1,
    native_methods,
};

/* The calls' shapes this source has (streamsafe/_accel.py refuses a build of older sources: a stale build's calls
 * would take other arguments). 2: launch_copy takes a second input's three arguments. */
#define STREAMSAFE_NATIVE_ABI 2

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&native_module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI", STREAMSAFE_NATIVE_ABI) < 0) Py_CLEAR(m);
    return m;
}
