/* streamsafe._native's steady-state frame: StreamContract._replay (streamsafe/contract.py) as replay(), the
 * import of SafeImage.__dlpack__ (streamsafe/outputs.py) as import_output(), and auto's thread check
 * (streamsafe/occupancy.py) as note_run().
 *
 * The same steps as the Python methods, in the same order, on the same objects: the call's facts, the
 * recipe whose facts and ledger state match, the effect's lock, the recipe's bound fences (their driver
 * calls issued here, in the program's context), the raw call, the ledger's update, the input protection,
 * the counters, the output objects; for the import, the consumer stream the ledger knows, the import's
 * fences, the reader and the view. What is rare (STREAMSAFE_CHECK_REPLAY's check, views of other effects'
 * outputs as inputs, keep-alives, a fence program that is not bound or is bound for one thread, inputs
 * that are not torch tensors, a per-thread run stream) calls the Python method that does it. Anything the
 * Python method would not replay or import, this leaves alone: it returns None before it has changed
 * anything, and the Python path takes the call. The contract's and the ledger's attributes are read when
 * the Python reads them; a recipe and a fence program are read from the tuples they keep for it
 * (Recipe.native, FenceProgram.native), which never change.
 *
 * The Python methods stay the reference: streamsafe uses them when this is not built or
 * STREAMSAFE_NATIVE=0, and the tests run the same frames through both (tests/test_native_replay.py,
 * tests/test_occupancy.py, tests/gpu/test_native_replay_gpu.py). Nothing here blocks the host or
 * releases the GIL beyond what the calls it makes do (the effect's run(), a host wait in a program).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <string.h>
#include <structmember.h>

#include "_replay.h"

/* Section timers for explaining a benchmark (never in a normal build): compiled in with
 * -DSTREAMSAFE_FRAME_PROFILE, read and reset by frame_profile() (benchmarks/frame_sections.py). One
 * thread's frames at a time: the clock is one static. */
#ifdef STREAMSAFE_FRAME_PROFILE
#include <time.h>
enum {
    S_FACTS, S_RECIPE, S_HOLD, S_CONFIG, S_MATCH, S_COUNT, S_BEFORE, S_ARRAYS, S_EFFECT, S_AFTER_RUN, S_AFTER_FENCES,
    S_PROTECT, S_TAIL, S_LET_GO, S_OUTPUT, I_ENTRY, I_CONSUMER_STREAM, I_HOLD, I_HELD, I_LET_GO, I_STATE, N_SECTIONS
};
static const char *SECTION_NAMES[N_SECTIONS] = {
    "replay: closed check, device, the call's facts", "replay: the recipe found by its facts",
    "replay: the effect's lock taken", "replay: the config read", "replay: the recipe's ledger state checked",
    "replay: counters (_shared, replays, check_replay, stats)", "replay: the fences before the run",
    "replay: the inputs, views read", "replay: the effect's run()", "replay: the ledger after the run",
    "replay: the fences after the run", "replay: the inputs protected (record_stream)",
    "replay: keep-alives, the last plan, run counts", "replay: the lock let go", "replay: SafeOutput, SafeImage made",
    "import: checks (hooks, slots, generation)", "import: the consumer stream", "import: the effect's lock taken",
    "import: the ledger's import (fences, reader)", "import: the lock let go", "import: the image's state"};
static unsigned long long section_ns[N_SECTIONS], section_calls[N_SECTIONS];
static struct timespec section_t;
static void section_start(void) { clock_gettime(CLOCK_MONOTONIC, &section_t); }
static void section_end(int i) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    section_ns[i] += (unsigned long long)((now.tv_sec - section_t.tv_sec) * 1000000000LL + (now.tv_nsec - section_t.tv_nsec));
    section_calls[i]++;
    section_t = now;
}
#define SECTION_START() section_start()
#define SECTION(i) section_end(i)
const char frame_profile_doc[] = "frame_profile() -> {section: (ns, calls)}: the section timers since the last call, then zeroed.";
PyObject *native_frame_profile(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *out = PyDict_New();
    for (int i = 0; out != NULL && i < N_SECTIONS; i++) {
        PyObject *v = Py_BuildValue("(KK)", section_ns[i], section_calls[i]);
        if (v == NULL || PyDict_SetItemString(out, SECTION_NAMES[i], v) < 0) Py_CLEAR(out);
        Py_XDECREF(v);
        section_ns[i] = section_calls[i] = 0;
    }
    return out;
}
#else
#define SECTION_START()
#define SECTION(i)
#endif

#if PY_VERSION_HEX < 0x030C0000 /* (Python 3.11: the exception as one object, as 3.12's calls give it) */
static PyObject *PyErr_GetRaisedException(void) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL) PyException_SetTraceback(value, tb);
    Py_DECREF(type);
    Py_XDECREF(tb);
    return value;
}

static void PyErr_SetRaisedException(PyObject *exc) {
    if (exc == NULL) {
        PyErr_Clear();
        return;
    }
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
}
#endif

/* ---- what bind_replay() was given --------------------------------------------------------------- */

static int bound_ = 0;
static PyObject *g_contract_globals; /* streamsafe.contract's globals: _TORCH_TENSOR, _RAW_STREAM, _TORCH_DEVICE */
static PyObject *g_steady;           /* the module streamsafe.steady: replays, check_replay */
static PyObject *g_views;            /* streamsafe.ledger._VIEWS */
static PyObject *g_local;            /* streamsafe.guarding._local */
static PyObject *g_raw_cache;        /* streamsafe.guarding._raw_cache */
static PyObject *g_raw_method;       /* streamsafe.guarding.raw_method */
static PyObject *g_call_raw;         /* streamsafe.guarding.call_raw */
static PyObject *g_safe_output;      /* streamsafe.outputs.SafeOutput */
static PyObject *g_safe_image;       /* streamsafe.outputs.SafeImage */
static PyObject *g_sim_array;        /* streamsafe.sim.backend.SimArray */
static PyObject *g_sim_backend;      /* streamsafe.backend.SimBackend */
static PyObject *g_thread_token;     /* streamsafe.streams.thread_token */
static PyObject *g_restore_counters; /* streamsafe.contract._restore_counters */
static PyObject *g_hooks;            /* the module streamsafe.hooks: observers */
static PyObject *g_sim_capsule;      /* streamsafe._dlpack.SimCapsule */
static PyObject *g_capsule_data_key; /* streamsafe._dlpack.capsule_data_key */
static PyObject *g_on_this_thread;   /* streamsafe.streams.on_this_thread */
static PyObject *g_prune_views;      /* streamsafe.ledger._prune_views */
static PyObject *g_ledger_module;    /* the module streamsafe.ledger: _get_ident */
static PyObject *g_get_ident;        /* threading.get_ident */
static PyObject *s__get_ident_ledger;
static PyObject *g_call_kwnames;     /* ("stream_ptr", "non_blocking") */

#define NAMES(X)                                                                                                      \
    X(_TORCH_TENSOR) X(_RAW_STREAM) X(_TORCH_DEVICE) X(closed) X(device) X(_input) X(ledger) X(stats) X(_config_getter) X(shape) X(get_device) X(buffer) X(backend)  \
    X(current_stream) X(_recipes) X(native) X(_owner) X(_closing_wait) X(_effect) X(effect) X(plan)  \
    X(escaped) X(input_shapes) X(readers) X(previous_sdk) X(config) X(_shared) X(replays) X(check_replay)             \
    X(_check_recipe) X(uncount) X(_read_views) X(override) X(raw) X(generation) X(out_stats) X(default_consumer)     \
    X(_hold_sdk_streams) X(_protect_inputs) X(keepalive) X(prune_keepalive) X(_last_plan) X(image) X(observers)  \
    X(known) X(on_output_read) X(data_ptr) X(torch_stream) X(torch_streams) X(handle) X(record_stream) X(thread) X(import_programs) X(_import_program) X(outstanding) X(holds) X(_hold) X(_lock_calls) X(view_of)

#define DECLARE(n) static PyObject *s_##n;
NAMES(DECLARE)
#undef DECLARE

#define IMAGE_NSLOTS 9 /* SafeImage's slots; their offsets, and SafeOutput's two, once bound */
static Py_ssize_t image_offsets[IMAGE_NSLOTS], output_offsets[2];
static int slot_offsets(PyObject *image_type, PyObject *output_type, Py_ssize_t *image_offs, Py_ssize_t *output_offs);

static int intern_names(void) {
#define INTERN(n)                                                                                                     \
    if (s_##n == NULL && (s_##n = PyUnicode_InternFromString(#n)) == NULL) return -1;
    NAMES(INTERN)
#undef INTERN
    return 0;
}

static const char *PARTS[] = {
    "contract_globals", "steady", "views", "local", "raw_cache", "raw_method", "call_raw", "SafeOutput",
    "SafeImage", "SimArray", "SimBackend", "thread_token", "restore_counters", "hooks", "SimCapsule",
    "capsule_data_key", "on_this_thread", "prune_views", "ledger", "get_ident", NULL,
};

const char bind_replay_doc[] = (
"bind_replay(parts: dict) -> None\n\n"
"The objects replay() works with, by name (streamsafe.contract passes them when it is imported):\n"
"contract_globals, steady, views, local, raw_cache, raw_method, call_raw, SafeOutput, SafeImage,\n"
"SimArray, SimBackend, thread_token, restore_counters, hooks, SimCapsule, capsule_data_key,\n"
"on_this_thread, prune_views, ledger (the module), get_ident (threading's). Process-wide.");

PyObject *native_bind_replay(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.bind_replay takes one dict of parts");
        return NULL;
    }
    PyObject *got[sizeof(PARTS) / sizeof(PARTS[0])];
    for (int i = 0; PARTS[i] != NULL; i++) {
        got[i] = PyDict_GetItemString(args[0], PARTS[i]); /* borrowed */
        if (got[i] == NULL) {
            PyErr_Format(PyExc_KeyError, "streamsafe._native.bind_replay: part %s missing", PARTS[i]);
            return NULL;
        }
    }
    if (intern_names() < 0) return NULL;
    if (s__get_ident_ledger == NULL && (s__get_ident_ledger = PyUnicode_InternFromString("_get_ident")) == NULL) return NULL;
    if (g_call_kwnames == NULL && (g_call_kwnames = Py_BuildValue("(ss)", "stream_ptr", "non_blocking")) == NULL)
        return NULL;
    /* every part checked, and the slots' offsets found, before anything is swapped in: a bind that raises changes
     * nothing (a first one that raises leaves replay() refusing to run) */
    PyObject *globals = got[0], *views = got[2], *raw_cache = got[4], *output_type = got[7], *image_type = got[8];
    if (!PyDict_Check(globals) || !PyDict_Check(views) || !PyDict_Check(raw_cache)) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.bind_replay: contract_globals, views and raw_cache must be dicts");
        return NULL;
    }
    if (!PyType_Check(image_type) || !PyType_Check(output_type)) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.bind_replay: SafeImage and SafeOutput must be classes");
        return NULL;
    }
    Py_ssize_t image_offs[IMAGE_NSLOTS], output_offs[2];
    if (slot_offsets(image_type, output_type, image_offs, output_offs) < 0) return NULL;
    PyObject **slots[] = {&g_contract_globals, &g_steady, &g_views, &g_local, &g_raw_cache, &g_raw_method,
                          &g_call_raw, &g_safe_output, &g_safe_image, &g_sim_array, &g_sim_backend,
                          &g_thread_token, &g_restore_counters, &g_hooks, &g_sim_capsule, &g_capsule_data_key,
                          &g_on_this_thread, &g_prune_views, &g_ledger_module, &g_get_ident};
    for (int i = 0; PARTS[i] != NULL; i++) {
        Py_INCREF(got[i]);
        Py_XSETREF(*slots[i], got[i]);
    }
    memcpy(image_offsets, image_offs, sizeof(image_offs));
    memcpy(output_offsets, output_offs, sizeof(output_offs));
    bound_ = 1;
    Py_RETURN_NONE;
}

/* ---- small helpers ------------------------------------------------------------------------------ */

/* obj.name (new reference), or NULL with an exception. (Through the object, never its __dict__: reading an
 * instance's dict from C would make Python's own attribute reads of it slower from then on.) */
static PyObject *get(PyObject *obj, PyObject *name) { return PyObject_GetAttr(obj, name); }

static int set(PyObject *obj, PyObject *name, PyObject *value) { return PyObject_SetAttr(obj, name, value); }

/* obj.name is truthy: 1, 0, or -1 with an exception */
static int attr_true(PyObject *obj, PyObject *name) {
    PyObject *v = get(obj, name);
    if (v == NULL) return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* a == b as Python's `==` decides it (no identity shortcut): 1, 0, or -1 with an exception */
static int equal(PyObject *a, PyObject *b) {
    PyObject *r = PyObject_RichCompare(a, b, Py_EQ);
    if (r == NULL) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* obj.name == other: 1, 0, or -1 with an exception */
static int attr_eq(PyObject *obj, PyObject *name, PyObject *other) {
    PyObject *v = get(obj, name);
    if (v == NULL) return -1;
    int t = equal(v, other);
    Py_DECREF(v);
    return t;
}

/* obj.name is other: 1, 0, or -1 */
static int attr_is(PyObject *obj, PyObject *name, PyObject *other) {
    PyObject *v = get(obj, name);
    if (v == NULL) return -1;
    int t = v == other;
    Py_DECREF(v);
    return t;
}

static PyObject *method2(PyObject *obj, PyObject *name, PyObject *a, PyObject *b) {
    PyObject *argv[3] = {obj, a, b};
    return PyObject_VectorcallMethod(name, argv, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static int call_ok(PyObject *r) { /* a call's result dropped: 0, or -1 when it raised */
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* A tuple attribute of `size` items (new reference), or NULL with a TypeError naming it. */
static PyObject *parts_of(PyObject *obj, PyObject *name, Py_ssize_t size) {
    PyObject *parts = get(obj, name);
    if (parts != NULL && (!PyTuple_CheckExact(parts) || PyTuple_GET_SIZE(parts) != size)) {
        PyErr_Format(PyExc_TypeError, "streamsafe._native.replay: %R must be a tuple of %zd items (a build older than its "
                     "Python side? pip install -e . rebuilds it)", name, size);
        Py_CLEAR(parts);
    }
    return parts;
}

/* An instance of a class with __slots__, its slots filled in place (what its __init__ does, without the call). */
static PyObject *with_slots(PyObject *type, const Py_ssize_t *offsets, PyObject *const *values, int n) {
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (obj == NULL) return NULL;
    for (int i = 0; i < n; i++) *(PyObject **)((char *)obj + offsets[i]) = Py_NewRef(values[i]);
    return obj;
}

/* The offset of slot `name` of `type` (a __slots__ member). */
static int slot_offset(PyObject *type, const char *name, Py_ssize_t *out) {
    PyObject *d = PyObject_GetAttrString(type, name);
    if (d == NULL) return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok) *out = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) PyErr_Format(PyExc_TypeError, "streamsafe._native.bind_replay: %R.%s is not a __slots__ member", type, name);
    return ok ? 0 : -1;
}

/* SafeImage's slots in the order its __init__ sets them (IMAGE_NSLOTS, their offsets: at the top) */
static const char *IMAGE_SLOTS[] = {"_effect", "_ledger", "_capsule", "_generation", "_device", "_default_consumer",
                                    "_consumed", "_escapes", "_consumer"};

/* The offsets of SafeImage's slots (IMAGE_SLOTS' order) and SafeOutput's (raw, image) into the arrays given. */
static int slot_offsets(PyObject *image_type, PyObject *output_type, Py_ssize_t *image_offs, Py_ssize_t *output_offs) {
    for (int i = 0; i < IMAGE_NSLOTS; i++)
        if (slot_offset(image_type, IMAGE_SLOTS[i], &image_offs[i]) < 0) return -1;
    if (slot_offset(output_type, "raw", &output_offs[0]) < 0 || slot_offset(output_type, "image", &output_offs[1]) < 0)
        return -1;
    return 0;
}

/* ---- the recipe's and the programs' parts (Recipe.native, FenceProgram.native) ------------------------ */

enum {
    R_FACTS, R_THREAD, R_READERS, R_ESCAPED, R_PREVIOUS_PLAN, R_PREVIOUS_SDK, R_INPUT_SHAPES, R_LEDGER_CONFIG, R_CONFIG,
    R_BEFORE, R_BEFORE_PARTS, R_AFTER, R_AFTER_PARTS,
    R_ARRAYS_ONLY, R_RUN_STREAM, R_RUN_PTR, R_NON_BLOCKING, R_PLAN, R_DEFAULT_CONSUMER, R_SHAPES, R_PROTECT,
    R_RUN_COUNTS, R_SDK_STREAMS, R_SIZE
};
enum { G_HAS, G_BOUND, G_THREAD, G_COUNTS, G_STEPS, G_CTX, G_FAILED, G_SIZE }; /* FenceProgram.native */
#define P(parts, i) PyTuple_GET_ITEM(parts, i)

/* torch.Tensor once a tensor was seen (borrowed), else NULL */
static PyObject *torch_tensor(void) {
    PyObject *tensor = PyDict_GetItem(g_contract_globals, s__TORCH_TENSOR);
    return tensor == Py_None ? NULL : tensor;
}

/* ---- the call's facts (StreamContract._facts, for a call without keywords) ----------------------- */

#define MAX_FACTS 64 /* (facts of calls with more arguments are built in memory of their own) */

/* The facts tuple (new reference), Py_None (new reference) when the call must take the general path,
 * NULL with an exception. */
static PyObject *facts_of(PyObject *contract, PyObject *dev, PyObject *name, PyObject *call_args, PyObject *shared) {
    PyObject *small[MAX_FACTS], **items = small;
    Py_ssize_t n = 0, nargs = PyTuple_GET_SIZE(call_args);
    PyObject *result = NULL, *current = NULL, *sim = NULL, *declared = NULL, *backend = NULL;
    if (4 + 2 * nargs + 1 > MAX_FACTS && (items = PyMem_New(PyObject *, 4 + 2 * nargs + 1)) == NULL)
        return PyErr_NoMemory();
    if ((declared = PyObject_GetAttr(contract, s__input)) == NULL) {
        if (items != small) PyMem_Free(items);
        return NULL;
    }
    /* (held for the call: the calls below run Python code, which may rebind the module's globals) */
    PyObject *tensor = Py_XNewRef(PyDict_GetItemWithError(g_contract_globals, s__TORCH_TENSOR));
    PyObject *raw_stream = tensor == NULL && PyErr_Occurred() ? NULL : Py_XNewRef(PyDict_GetItemWithError(g_contract_globals, s__RAW_STREAM));
    if (PyErr_Occurred()) goto done;
    items[n++] = Py_NewRef(name);
    items[n++] = Py_NewRef(Py_None);
    items[n++] = Py_NewRef(Py_False);
    items[n++] = Py_NewRef(shared);
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyObject *a = PyTuple_GET_ITEM(call_args, i);
        PyTypeObject *kind = Py_TYPE(a);
        if (tensor != NULL && tensor != Py_None && (PyObject *)kind == tensor) {
            PyObject *d = PyObject_CallMethodNoArgs(a, s_get_device);
            if (d == NULL) goto done;
            int same = PyObject_RichCompareBool(d, dev, Py_EQ);
            Py_DECREF(d);
            if (same < 0) goto done;
            if (!same) goto fallback;
            if ((items[n] = PyObject_GetAttr(a, s_shape)) == NULL) goto done;
            n++;
            if (declared == Py_None) {
                if (current == NULL) {
                    if (raw_stream == NULL || raw_stream == Py_None) goto fallback;
                    if ((current = PyObject_CallOneArg(raw_stream, dev)) == NULL) goto done;
                }
                items[n++] = Py_NewRef(current);
            } else {
                items[n++] = Py_NewRef(declared);
            }
        } else if ((PyObject *)kind == g_sim_array) {
            PyObject *buffer = PyObject_GetAttr(a, s_buffer);
            if (buffer == NULL) goto done;
            int same = attr_eq(buffer, s_device, dev);
            Py_DECREF(buffer);
            if (same < 0) goto done;
            if (!same) goto fallback;
            Py_XSETREF(sim, PyObject_GetAttr(a, s_backend));
            if (sim == NULL) goto done;
            if ((items[n] = PyObject_GetAttr(a, s_shape)) == NULL) goto done;
            n++;
            if (declared != Py_None) {
                items[n++] = Py_NewRef(declared);
            } else {
                if ((items[n] = PyObject_CallMethodOneArg(sim, s_current_stream, dev)) == NULL) goto done;
                n++;
            }
        } else if (kind == &PyLong_Type || kind == &PyFloat_Type) {
            items[n++] = Py_NewRef((PyObject *)kind);
        } else {
            goto fallback;
        }
    }
    if (n == 4) goto fallback;
    if ((backend = PyObject_GetAttr(contract, s_backend)) == NULL) goto done;
    if (sim != NULL) {
        if (sim != backend) goto fallback;
        if ((items[n] = PyObject_CallMethodOneArg(sim, s_current_stream, dev)) == NULL) goto done;
        n++;
    } else {
        int is_sim = PyObject_IsInstance(backend, g_sim_backend);
        if (is_sim < 0) goto done;
        if (is_sim || tensor == NULL || tensor == Py_None) goto fallback;
        PyObject *torch_device = PyDict_GetItemWithError(g_contract_globals, s__TORCH_DEVICE);
        if (torch_device == NULL) {
            if (PyErr_Occurred()) goto done;
            goto fallback;
        }
        Py_INCREF(torch_device);
        PyObject *here = PyObject_CallNoArgs(torch_device);
        Py_DECREF(torch_device);
        if (here == NULL) goto done;
        int same = PyObject_RichCompareBool(here, dev, Py_EQ);
        Py_DECREF(here);
        if (same < 0) goto done;
        if (!same) goto fallback;
        if (current == NULL) {
            if (raw_stream == NULL || raw_stream == Py_None) goto fallback;
            if ((current = PyObject_CallOneArg(raw_stream, dev)) == NULL) goto done;
        }
        items[n++] = Py_NewRef(current);
    }
    if ((result = PyTuple_New(n)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(result, i, items[i]);
    n = 0; /* (the tuple owns them now) */
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(items[i]);
    if (items != small) PyMem_Free(items);
    Py_XDECREF(current);
    Py_XDECREF(sim);
    Py_XDECREF(tensor);
    Py_XDECREF(raw_stream);
    Py_XDECREF(declared);
    Py_XDECREF(backend);
    return result;
}

/* ---- the recipe --------------------------------------------------------------------------------- */

/* Recipe.matches(ledger, config): 1, 0, or -1 with an exception */
static int recipe_matches(PyObject *rparts, PyObject *ledger, PyObject *config) {
    int t;
    PyObject *thread = P(rparts, R_THREAD);
    if (thread != Py_None) {
        PyObject *token = PyObject_CallNoArgs(g_thread_token);
        if (token == NULL) return -1;
        t = PyObject_RichCompareBool(thread, token, Py_EQ);
        Py_DECREF(token);
        if (t <= 0) return t;
    }
    if ((t = attr_is(ledger, s_plan, P(rparts, R_PREVIOUS_PLAN))) <= 0) return t;
    if ((t = attr_is(ledger, s_escaped, P(rparts, R_ESCAPED))) <= 0) return t;
    if ((t = attr_eq(ledger, s_input_shapes, P(rparts, R_INPUT_SHAPES))) <= 0) return t;
    /* tuple(ledger.readers) == recipe.readers */
    PyObject *readers = get(ledger, s_readers), *want = P(rparts, R_READERS);
    if (readers == NULL) return -1;
    if (PyDict_CheckExact(readers) && PyTuple_CheckExact(want)) {
        t = PyDict_GET_SIZE(readers) == PyTuple_GET_SIZE(want);
        Py_ssize_t pos = 0, i = 0;
        PyObject *key, *value;
        while (t == 1 && PyDict_Next(readers, &pos, &key, &value)) {
            Py_INCREF(key);
            t = PyObject_RichCompareBool(key, PyTuple_GET_ITEM(want, i++), Py_EQ);
            Py_DECREF(key);
        }
    } else {
        PyObject *got = PySequence_Tuple(readers);
        t = got == NULL ? -1 : PyObject_RichCompareBool(got, want, Py_EQ);
        Py_XDECREF(got);
    }
    Py_DECREF(readers);
    if (t <= 0) return t;
    if ((t = attr_eq(ledger, s_previous_sdk, P(rparts, R_PREVIOUS_SDK))) <= 0) return t;
    if ((t = equal(config, P(rparts, R_CONFIG))) <= 0) return t;
    return attr_eq(ledger, s_config, P(rparts, R_LEDGER_CONFIG));
}

/* ---- fence programs (FenceProgram.__call__) ----------------------------------------------------- */

/* Run a program of fences (FenceProgram.__call__) given its parts (FenceProgram.native): its steps in one call
 * of the C extension when it has them and its context is current, else its bound call, then its counts; the
 * program's own __call__ when it is not bound or bound for one thread. 0, or -1 with an exception. */
static int run_program(PyObject *program, PyObject *parts, PyObject *stats) {
    if (!PyTuple_CheckExact(parts) || PyTuple_GET_SIZE(parts) != G_SIZE) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.replay: a program's parts are not what this build reads "
                        "(pip install -e . rebuilds it)");
        return -1;
    }
    PyObject *bound = P(parts, G_BOUND), *counts = P(parts, G_COUNTS), *steps = P(parts, G_STEPS);
    int heard = 0; /* (an observer registered meanwhile, say while the effect ran: it hears of each fence) */
    if (bound != Py_None && P(parts, G_THREAD) == Py_None && (heard = attr_true(g_hooks, s_observers)) < 0) return -1;
    if (bound == Py_None || P(parts, G_THREAD) != Py_None || heard) return call_ok(PyObject_CallOneArg(program, stats));
    PyObject *r = steps == Py_None ? Py_NewRef(Py_NotImplemented) : run_fence_steps(steps, P(parts, G_CTX));
    if (r == Py_NotImplemented) { /* (no steps, or another context current: the bound call makes it current) */
        Py_DECREF(r);
        r = PyObject_CallNoArgs(bound);
    } else if (r != NULL && r != Py_None) { /* (step, CUresult) of the step that failed: its error */
        PyObject *raised = PyObject_CallOneArg(P(parts, G_FAILED), r);
        Py_XDECREF(raised);
        Py_DECREF(r);
        r = NULL;
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "streamsafe._native.replay: a fence failed");
    }
    if (call_ok(r) < 0) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(counts); i++) {
        PyObject *pair = PyTuple_GET_ITEM(counts, i);
        PyObject *key = PyTuple_GET_ITEM(pair, 0), *n = PyTuple_GET_ITEM(pair, 1);
        PyObject *old = PyDict_GetItemWithError(stats, key);
        if (old == NULL && PyErr_Occurred()) return -1;
        PyObject *sum = old == NULL ? Py_NewRef(n) : PyNumber_Add(old, n);
        int bad = sum == NULL || PyDict_SetItem(stats, key, sum) < 0;
        Py_XDECREF(sum);
        if (bad) return -1;
    }
    return 0;
}

/* ---- the raw call (guarding.call_raw) ----------------------------------------------------------- */

static PyObject *call_effect_with(PyObject **stack, PyObject *effect, PyObject *name, PyObject *call_args,
                                  PyObject *run_ptr, PyObject *nb);

/* guarding.call_raw(effect, name, *call_args, stream_ptr=run_ptr, non_blocking=nb) */
static PyObject *call_effect(PyObject *effect, PyObject *name, PyObject *call_args, PyObject *run_ptr, PyObject *nb) {
    Py_ssize_t nargs = PyTuple_GET_SIZE(call_args);
    PyObject *small[MAX_FACTS + 4], **stack = small; /* (the effect or call_raw's two, the arguments, two keywords) */
    if (nargs + 4 > MAX_FACTS + 4 && (stack = PyMem_New(PyObject *, nargs + 4)) == NULL) return PyErr_NoMemory();
    PyObject *raw = call_effect_with(stack, effect, name, call_args, run_ptr, nb);
    if (stack != small) PyMem_Free(stack);
    return raw;
}

static PyObject *call_effect_with(PyObject **stack, PyObject *effect, PyObject *name, PyObject *call_args,
                                  PyObject *run_ptr, PyObject *nb) {
    Py_ssize_t nargs = PyTuple_GET_SIZE(call_args);
    PyObject *overrides = PyObject_GetAttr(g_local, s_override);
    if (overrides == NULL) return NULL;
    int some = PyObject_IsTrue(overrides);
    Py_DECREF(overrides);
    if (some < 0) return NULL;
    if (some) { /* a dispatcher reached by super() named the method to run: the Python call sorts that out */
        stack[0] = effect;
        stack[1] = name;
        for (Py_ssize_t i = 0; i < nargs; i++) stack[2 + i] = PyTuple_GET_ITEM(call_args, i);
        stack[2 + nargs] = run_ptr;
        stack[3 + nargs] = nb;
        return PyObject_Vectorcall(g_call_raw, stack, 2 + nargs, g_call_kwnames);
    }
    PyObject *cls = (PyObject *)Py_TYPE(effect);
    PyObject *key = PyTuple_Pack(2, cls, name);
    if (key == NULL) return NULL;
    PyObject *method = Py_XNewRef(PyDict_GetItemWithError(g_raw_cache, key));
    Py_DECREF(key);
    if (method == NULL && PyErr_Occurred()) return NULL;
    int usable = method == NULL ? 0 : PyObject_IsTrue(method);
    if (usable < 0) {
        Py_DECREF(method);
        return NULL;
    }
    if (!usable) {
        Py_XDECREF(method);
        PyObject *argv[2] = {cls, name};
        if ((method = PyObject_Vectorcall(g_raw_method, argv, 2, NULL)) == NULL) return NULL;
    }
    PyObject *ids = PyObject_GetAttr(g_local, s_raw);
    if (ids == NULL) {
        Py_DECREF(method);
        return NULL;
    }
    PyObject *id = PyLong_FromVoidPtr(effect);
    int inside = id == NULL ? -1 : PySet_Contains(ids, id);
    if (inside < 0 || (!inside && PySet_Add(ids, id) < 0)) {
        Py_XDECREF(id);
        Py_DECREF(ids);
        Py_DECREF(method);
        return NULL;
    }
    stack[0] = effect;
    for (Py_ssize_t i = 0; i < nargs; i++) stack[1 + i] = PyTuple_GET_ITEM(call_args, i);
    stack[1 + nargs] = run_ptr;
    stack[2 + nargs] = nb;
    PyObject *raw = PyObject_Vectorcall(method, stack, 1 + nargs, g_call_kwnames);
    if (!inside) {
        PyObject *exc = PyErr_GetRaisedException();
        if (PySet_Discard(ids, id) < 0) {
            Py_CLEAR(raw);
            Py_XDECREF(exc);
        } else {
            PyErr_SetRaisedException(exc);
        }
    }
    Py_DECREF(id);
    Py_DECREF(ids);
    Py_DECREF(method);
    return raw;
}

/* ---- the ledger's update (Ledger.after_run) ----------------------------------------------------- */

static PyObject *after_run(PyObject *ledger, PyObject *rparts, PyObject *stats) {
    PyObject *plan = P(rparts, R_PLAN), *generation = NULL, *old_plan = NULL, *previous = NULL, *readers = NULL;
    PyObject *one = PyLong_FromLong(1), *old = get(ledger, s_generation);
    if (one == NULL || old == NULL) goto fail;
    if ((generation = PyNumber_Add(old, one)) == NULL || set(ledger, s_generation, generation) < 0) goto fail;
    if ((old_plan = get(ledger, s_plan)) == NULL) goto fail;
    if ((previous = get(ledger, s_previous_sdk)) == NULL) goto fail;
    int empty = PyObject_Not(previous);
    if (empty < 0) goto fail;
    int new_streams = plan != old_plan || empty;
    if ((readers = PyDict_New()) == NULL) goto fail;
    if (set(ledger, s_plan, plan) < 0 || set(ledger, s_out_stats, stats) < 0 ||
        set(ledger, s_default_consumer, P(rparts, R_DEFAULT_CONSUMER)) < 0 || set(ledger, s_readers, readers) < 0 ||
        set(ledger, s_escaped, Py_False) < 0 || set(ledger, s_previous_sdk, P(rparts, R_SDK_STREAMS)) < 0 ||
        set(ledger, s_input_shapes, P(rparts, R_SHAPES)) < 0)
        goto fail;
    if (new_streams && call_ok(PyObject_CallMethodNoArgs(ledger, s__hold_sdk_streams)) < 0) goto fail;
    goto done;
fail:
    Py_CLEAR(generation);
done:
    Py_XDECREF(one);
    Py_XDECREF(old);
    Py_XDECREF(old_plan);
    Py_XDECREF(previous);
    Py_XDECREF(readers);
    return generation;
}

/* ---- replay ------------------------------------------------------------------------------------- */

/* The calling thread's ident as the ledger records its holder (streamsafe.ledger._get_ident, read at each
 * call; while it is threading.get_ident, the same number without the call). New reference, or NULL. */
static PyObject *holder_ident(void) {
    PyObject *get_ident = PyObject_GetAttr(g_ledger_module, s__get_ident_ledger);
    if (get_ident == NULL) return NULL;
    PyObject *me = get_ident == g_get_ident ? PyLong_FromUnsignedLong(PyThread_get_thread_ident()) : PyObject_CallNoArgs(get_ident);
    Py_DECREF(get_ident);
    return me;
}

/* Ledger.try_hold(): the lock taken without blocking (its calls into *calls), then Ledger._took(False)'s
 * bookkeeping, the previous holder into *owner and *closing (new references, for let_go). 1: held; 0: another
 * thread holds the effect; -1 with an exception (*held says whether the lock was taken: let go of it). */
static int try_hold(PyObject *ledger, PyObject **calls, int *held, PyObject **owner, PyObject **closing) {
    if ((*calls = parts_of(ledger, s__lock_calls, 2)) == NULL) return -1;
    PyObject *got = PyObject_CallOneArg(P(*calls, 0), Py_False);
    if (got == NULL) return -1;
    int t = PyObject_IsTrue(got);
    Py_DECREF(got);
    if (t <= 0) return t;
    *held = 1;
    if ((*owner = get(ledger, s__owner)) == NULL || (*closing = get(ledger, s__closing_wait)) == NULL) return -1;
    PyObject *me = holder_ident();
    if (me == NULL) return -1;
    t = set(ledger, s__owner, me);
    Py_DECREF(me);
    return t < 0 || set(ledger, s__closing_wait, Py_False) < 0 ? -1 : 1;
}

/* Ledger.let_go(outer): the previous holder back, the lock released, an exception raised before it kept.
 * 0, or -1 with the exception let_go raised (the earlier one dropped). */
static int let_go(PyObject *ledger, PyObject *calls, PyObject *owner, PyObject *closing) {
    PyObject *exc = PyErr_GetRaisedException();
    int bad = set(ledger, s__owner, owner ? owner : Py_None) < 0 ||
              set(ledger, s__closing_wait, closing ? closing : Py_False) < 0 ||
              call_ok(PyObject_CallNoArgs(P(calls, 1))) < 0;
    if (bad) {
        Py_XDECREF(exc);
        return -1;
    }
    PyErr_SetRaisedException(exc);
    return 0;
}

/* the effect, as the contract's `effect` property gives it */
static PyObject *effect_of(PyObject *contract) {
    PyObject *effect = get(contract, s__effect);
    if (effect == NULL || effect != Py_None) return effect;
    Py_DECREF(effect);
    return PyObject_GetAttr(contract, s_effect);
}

/* stats[key] += n for each (key, n) of the recipe's run counts */
static int add_run_counts(PyObject *rparts, PyObject *stats) {
    PyObject *counts = P(rparts, R_RUN_COUNTS);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(counts); i++) {
        PyObject *pair = PyTuple_GET_ITEM(counts, i);
        PyObject *key = PyTuple_GET_ITEM(pair, 0), *n = PyTuple_GET_ITEM(pair, 1);
        PyObject *old = PyObject_GetItem(stats, key), *sum = NULL;
        int bad = old == NULL || (sum = PyNumber_Add(old, n)) == NULL || PyObject_SetItem(stats, key, sum) < 0;
        Py_XDECREF(old);
        Py_XDECREF(sum);
        if (bad) return -1;
    }
    return 0;
}

/* the positional arguments that are input arrays (no int or float timestep) */
static PyObject *arrays_of(PyObject *rparts, PyObject *call_args) {
    if (P(rparts, R_ARRAYS_ONLY) == Py_True) return Py_NewRef(call_args);
    Py_ssize_t n = PyTuple_GET_SIZE(call_args), k = 0;
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(call_args, i);
        if (Py_TYPE(a) != &PyLong_Type && Py_TYPE(a) != &PyFloat_Type) PyTuple_SET_ITEM(out, k++, Py_NewRef(a));
    }
    if (_PyTuple_Resize(&out, k) < 0) return NULL;
    return out;
}

/* The first recipe (newest first) whose facts are `facts` and, with `ledger` not NULL, whose state matches:
 * its parts (new reference) and the recipe in *recipe (new reference); Py_None (new reference) when none,
 * NULL with an exception. */
static PyObject *find_recipe(PyObject *recipes, PyObject *facts, PyObject *ledger, PyObject *config, PyObject **recipe) {
    Py_CLEAR(*recipe);
    if (!PyList_CheckExact(recipes)) Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(recipes); i++) {
        PyObject *r = Py_NewRef(PyList_GET_ITEM(recipes, i));
        PyObject *rparts = parts_of(r, s_native, R_SIZE);
        if (rparts == NULL) {
            Py_DECREF(r);
            return NULL;
        }
        int t = equal(P(rparts, R_FACTS), facts);
        if (t > 0 && ledger != NULL) t = recipe_matches(rparts, ledger, config);
        if (t > 0) {
            *recipe = r;
            return rparts;
        }
        Py_DECREF(r);
        Py_DECREF(rparts);
        if (t < 0) return NULL;
    }
    Py_RETURN_NONE;
}

/* StreamContract._read_views(arrays, run_stream): only an input whose memory is a registered view calls the
 * Python method (for that input); torch tensors and model arrays are looked up here. 0, or -1. */
static int read_views(PyObject *contract, PyObject *arrays, PyObject *run_stream, PyObject *tensor) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(arrays); i++) {
        PyObject *a = PyTuple_GET_ITEM(arrays, i), *key;
        if (tensor != NULL && (PyObject *)Py_TYPE(a) == tensor) key = PyObject_CallMethodNoArgs(a, s_data_ptr);
        else if ((PyObject *)Py_TYPE(a) == g_sim_array) key = PyObject_GetAttr(a, s_buffer);
        else { /* (the rest, as Python does; a replayed call's inputs are tensors or model arrays, so never) */
            PyObject *rest = PyTuple_GetSlice(arrays, i, PyTuple_GET_SIZE(arrays));
            if (rest == NULL) return -1;
            int rc = call_ok(method2(contract, s__read_views, rest, run_stream));
            Py_DECREF(rest);
            return rc;
        }
        if (key == NULL) return -1;
        PyObject *found = PyDict_GetItemWithError(g_views, key);
        Py_DECREF(key);
        if (found == NULL && PyErr_Occurred()) return -1;
        if (found != NULL) {
            PyObject *one = PyTuple_Pack(1, a);
            if (one == NULL) return -1;
            int rc = call_ok(method2(contract, s__read_views, one, run_stream));
            Py_DECREF(one);
            if (rc < 0) return -1;
        }
    }
    return 0;
}

/* StreamContract._protect_inputs(arrays, run_stream): torch tensors on a stream that is not a per-thread
 * one get record_stream(ledger.torch_stream(run_stream)) here; anything else calls the Python method. */
static int protect_inputs(PyObject *contract, PyObject *ledger, PyObject *arrays, PyObject *run_stream, PyObject *tensor) {
    if (PyTuple_GET_SIZE(arrays) == 0) return 0; /* (nothing to protect: the Python loop runs over none) */
    int t = attr_true(run_stream, s_thread);
    if (t < 0) return -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(arrays) && !t; i++)
        t = tensor == NULL || (PyObject *)Py_TYPE(PyTuple_GET_ITEM(arrays, i)) != tensor;
    if (t) return call_ok(method2(contract, s__protect_inputs, arrays, run_stream));
    PyObject *ts = NULL, *streams = PyObject_GetAttr(ledger, s_torch_streams), *handle = NULL;
    if (streams == NULL || (handle = PyObject_GetAttr(run_stream, s_handle)) == NULL) { /* (ledger.torch_stream's cache) */
        Py_XDECREF(streams);
        return -1;
    }
    if (PyDict_CheckExact(streams)) ts = Py_XNewRef(PyDict_GetItemWithError(streams, handle));
    Py_DECREF(streams);
    Py_DECREF(handle);
    if (ts == NULL && (PyErr_Occurred() || (ts = PyObject_CallMethodOneArg(ledger, s_torch_stream, run_stream)) == NULL))
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(arrays) && rc == 0; i++)
        rc = call_ok(PyObject_CallMethodOneArg(PyTuple_GET_ITEM(arrays, i), s_record_stream, ts));
    Py_DECREF(ts);
    return rc;
}

const char replay_doc[] = (
"replay(contract, name, args, shared) -> SafeOutput | None\n\n"
"StreamContract._replay(name, args, {}, shared) in C: the frame replayed from the contract's matching\n"
"recipe, or None (nothing done) when none matches and the contract must plan the call. Blocks the\n"
"host only where the recipe's fences or the effect's run() do.");

PyObject *native_replay(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyTuple_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.replay(contract, name, args: tuple, shared)");
        return NULL;
    }
    if (!bound_) {
        PyErr_SetString(PyExc_RuntimeError, "streamsafe._native.replay: bind_replay() was not called");
        return NULL;
    }
    SECTION_START();
    PyObject *contract = args[0], *name = args[1], *call_args = args[2], *shared = args[3];
    PyObject *result = NULL, *device = NULL, *facts = NULL, *recipes = NULL, *rparts = NULL, *outer_owner = NULL;
    PyObject *outer_closing = NULL, *effect = NULL, *config = NULL, *counted = NULL, *arrays = NULL, *raw = NULL;
    PyObject *generation = NULL, *image = NULL, *safe_image = NULL, *ledger = NULL, *calls = NULL, *stats = NULL;
    PyObject *recipe = NULL;
    int held = 0, t;

    /* (the contract's attributes read as the Python method reads them, when it reads them) */
    if ((t = attr_true(contract, s_closed)) != 0) return t < 0 ? NULL : Py_NewRef(Py_None);
    if ((device = PyObject_GetAttr(contract, s_device)) == NULL) return NULL;
    if ((facts = facts_of(contract, device, name, call_args, shared)) == NULL) goto fail;
    if (facts == Py_None) goto nothing;
    SECTION(S_FACTS);
    if ((recipes = get(contract, s__recipes)) == NULL) goto fail;
    if ((rparts = find_recipe(recipes, facts, NULL, NULL, &recipe)) == NULL) goto fail;
    if (rparts == Py_None) goto nothing;
    SECTION(S_RECIPE);
    /* ledger.try_hold() */
    if ((ledger = PyObject_GetAttr(contract, s_ledger)) == NULL) goto fail;
    if ((t = try_hold(ledger, &calls, &held, &outer_owner, &outer_closing)) < 0) goto fail;
    if (!t) goto nothing; /* another thread holds the effect: the general path waits or raises */
    SECTION(S_HOLD);
    /* config = self._config() (an attribute that went: the general path copes) */
    if ((effect = effect_of(contract)) != NULL) {
        PyObject *getter = PyObject_GetAttr(contract, s__config_getter);
        config = getter == NULL ? NULL : PyObject_CallOneArg(getter, effect);
        Py_XDECREF(getter);
    }
    if (config == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            goto nothing;
        }
        goto fail;
    }
    SECTION(S_CONFIG);
    if ((t = attr_true(ledger, s_closed)) != 0) {
        if (t < 0) goto fail;
        goto nothing;
    }
    if ((t = recipe_matches(rparts, ledger, config)) < 0) goto fail;
    if (!t) { /* another recipe of the same call may fit this state: the newest first, of those it holds now */
        Py_SETREF(recipes, get(contract, s__recipes));
        if (recipes == NULL) goto fail;
        Py_SETREF(rparts, find_recipe(recipes, facts, ledger, config, &recipe));
        if (rparts == NULL) goto fail;
        if (rparts == Py_None) goto nothing;
    }
    SECTION(S_MATCH);
    if (set(contract, s__shared, shared) < 0) goto fail;
    {
        PyObject *count = PyObject_GetAttr(g_steady, s_replays), *more = NULL;
        PyObject *one = PyLong_FromLong(1);
        t = count == NULL || one == NULL || (more = PyNumber_Add(count, one)) == NULL ||
            PyObject_SetAttr(g_steady, s_replays, more) < 0;
        Py_XDECREF(count);
        Py_XDECREF(one);
        Py_XDECREF(more);
        if (t) goto fail;
    }
    if ((t = attr_true(g_steady, s_check_replay)) < 0) goto fail;
    if (t) { /* STREAMSAFE_CHECK_REPLAY=1: plan the call again; the recipe must say the same */
        PyObject *kwargs = PyDict_New();
        if (kwargs == NULL) goto fail;
        PyObject *argv[5] = {contract, recipe, name, call_args, kwargs};
        t = call_ok(PyObject_VectorcallMethod(s__check_recipe, argv, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
        Py_DECREF(kwargs);
        if (t < 0) goto fail;
    }
    if ((stats = PyObject_GetAttr(contract, s_stats)) == NULL) goto fail;
    PyObject *before_parts = P(rparts, R_BEFORE_PARTS), *after_parts = P(rparts, R_AFTER_PARTS);
    if (!PyTuple_CheckExact(before_parts) || PyTuple_GET_SIZE(before_parts) != G_SIZE || !PyTuple_CheckExact(after_parts) ||
        PyTuple_GET_SIZE(after_parts) != G_SIZE) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.replay: a program's parts are not what this build reads");
        goto fail;
    }
    int has_before = P(before_parts, G_HAS) == Py_True;
    SECTION(S_COUNT);
    if (has_before) {
        if (P(before_parts, G_BOUND) == Py_None && (counted = PyDict_Copy(stats)) == NULL) goto fail; /* host waits, device syncs */
        if (run_program(P(rparts, R_BEFORE), before_parts, stats) < 0) goto fail;
    }
    SECTION(S_BEFORE);
    if ((arrays = arrays_of(rparts, call_args)) == NULL) goto fail;
    if (PyDict_GET_SIZE(g_views) > 0 && read_views(contract, arrays, P(rparts, R_RUN_STREAM), torch_tensor()) < 0) goto fail;
    SECTION(S_ARRAYS);
    raw = call_effect(effect, name, call_args, P(rparts, R_RUN_PTR), P(rparts, R_NON_BLOCKING));
    SECTION(S_EFFECT);
    if (raw == NULL) { /* refused (a dtype the facts do not hold): the counters as before, as planned calls */
        PyObject *exc = PyErr_GetRaisedException();
        PyObject *r;
        if (counted != NULL) {
            PyObject *argv[2] = {stats, counted};
            r = PyObject_Vectorcall(g_restore_counters, argv, 2, NULL);
        } else if (has_before) {
            r = PyObject_CallMethodOneArg(P(rparts, R_BEFORE), s_uncount, stats);
        } else {
            r = Py_NewRef(Py_None);
        }
        if (r == NULL) { /* (that failure is the one to report) */
            Py_XDECREF(exc);
            goto fail;
        }
        Py_DECREF(r);
        PyErr_SetRaisedException(exc);
        goto fail;
    }
    if ((generation = after_run(ledger, rparts, stats)) == NULL) goto fail;
    SECTION(S_AFTER_RUN);
    if (P(rparts, R_PROTECT) == Py_True) {
        if (P(after_parts, G_HAS) == Py_True && run_program(P(rparts, R_AFTER), after_parts, stats) < 0) goto fail;
        SECTION(S_AFTER_FENCES);
        if (protect_inputs(contract, ledger, arrays, P(rparts, R_RUN_STREAM), torch_tensor()) < 0) goto fail;
        SECTION(S_PROTECT);
    }
    if ((t = attr_true(ledger, s_keepalive)) < 0) goto fail;
    if (t && call_ok(PyObject_CallMethodNoArgs(ledger, s_prune_keepalive)) < 0) goto fail;
    if (set(contract, s__last_plan, P(rparts, R_PLAN)) < 0 || add_run_counts(rparts, stats) < 0) goto fail;
    SECTION(S_TAIL);
    result = Py_None; /* (a marker: the frame ran; the output objects come after the lock is let go) */
    goto release;

nothing:
    result = Py_None;
    goto release;
fail:
    result = NULL;
    Py_CLEAR(raw);
release:
    if (held && let_go(ledger, calls, outer_owner, outer_closing) < 0) result = NULL;
    SECTION(S_LET_GO);
    if (result == Py_None && raw != NULL) { /* SafeOutput(raw, SafeImage(ledger, raw.image, generation, device, consumer, effect)) */
        result = NULL;
        /* (the contract's device and effect read again, as the Python method reads them here) */
        Py_CLEAR(device);
        Py_CLEAR(effect);
        if ((image = PyObject_GetAttr(raw, s_image)) != NULL && (device = PyObject_GetAttr(contract, s_device)) != NULL &&
            (effect = effect_of(contract)) != NULL) {
            PyObject *slots[IMAGE_NSLOTS] = {effect, ledger, image, generation, device,
                                             P(rparts, R_DEFAULT_CONSUMER), Py_False, Py_True, Py_None};
            if ((safe_image = with_slots(g_safe_image, image_offsets, slots, IMAGE_NSLOTS)) != NULL) {
                PyObject *slots2[2] = {raw, safe_image};
                result = with_slots(g_safe_output, output_offsets, slots2, 2);
            }
        }
        SECTION(S_OUTPUT);
    } else if (result == Py_None) {
        Py_INCREF(result);
    }
    Py_XDECREF(device);
    Py_XDECREF(ledger);
    Py_XDECREF(calls);
    Py_XDECREF(stats);
    Py_XDECREF(facts);
    Py_XDECREF(recipes);
    Py_XDECREF(recipe);
    Py_XDECREF(rparts);
    Py_XDECREF(outer_owner);
    Py_XDECREF(outer_closing);
    Py_XDECREF(effect);
    Py_XDECREF(config);
    Py_XDECREF(counted);
    Py_XDECREF(arrays);
    Py_XDECREF(raw);
    Py_XDECREF(generation);
    Py_XDECREF(image);
    Py_XDECREF(safe_image);
    return result;
}

/* ---- the output's import (SafeImage.__dlpack__, Ledger.import_output) ------------------------------- */

static PyObject *slot_get(PyObject *obj, int i) { return *(PyObject **)((char *)obj + image_offsets[i]); } /* borrowed */

static void slot_set(PyObject *obj, int i, PyObject *value) {
    PyObject **at = (PyObject **)((char *)obj + image_offsets[i]);
    Py_XSETREF(*at, Py_NewRef(value));
}

enum { I_EFFECT, I_LEDGER, I_CAPSULE, I_GENERATION, I_DEVICE, I_DEFAULT_CONSUMER, I_CONSUMED, I_ESCAPES, I_CONSUMER };

/* Run an import program (FenceProgram.__call__ on the ledger's out_stats). 0, or -1 with an exception. */
static int run_import_program(PyObject *program, PyObject *stats) {
    PyObject *parts = parts_of(program, s_native, G_SIZE);
    if (parts == NULL) return -1;
    int rc = P(parts, G_HAS) == Py_True ? run_program(program, parts, stats) : 0;
    Py_DECREF(parts);
    return rc;
}

/* Ledger._import_held, the effect held: 0, or -1 with an exception; 1 when the output went meanwhile (the
 * Python call then raises as it should; nothing was done). */
/* Ledger._import_held's observers (registered after the import's first check, by another thread): each
 * hears the read, unless the ledger is the model's. 0, or -1 with an exception. */
static int notify_read(PyObject *ledger, PyObject *key, PyObject *consumer) {
    PyObject *observers = PyObject_GetAttr(g_hooks, s_observers), *backend = NULL, *device = NULL;
    int rc = -1, t = observers == NULL ? -1 : PyObject_IsTrue(observers);
    if (t <= 0) {
        rc = t;
        goto done;
    }
    if ((backend = get(ledger, s_backend)) == NULL || (t = PyObject_IsInstance(backend, g_sim_backend)) < 0) goto done;
    if (t) {
        rc = 0;
        goto done;
    }
    if ((device = get(ledger, s_device)) == NULL) goto done;
    PyObject *fast = PySequence_Fast(observers, "hooks.observers must be a sequence");
    if (fast == NULL) goto done;
    rc = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast) && rc == 0; i++) {
        PyObject *argv[4] = {PySequence_Fast_GET_ITEM(fast, i), key, consumer, device};
        rc = call_ok(PyObject_VectorcallMethod(s_on_output_read, argv, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
    }
    Py_DECREF(fast);
done:
    Py_XDECREF(observers);
    Py_XDECREF(backend);
    Py_XDECREF(device);
    return rc;
}

static int import_held(PyObject *ledger, PyObject *generation, PyObject *consumer, int escapes, PyObject *key) {
    PyObject *now = get(ledger, s_generation);
    if (now == NULL) return -1;
    int same = PyObject_RichCompareBool(now, generation, Py_EQ);
    Py_DECREF(now);
    if (same <= 0) return same < 0 ? -1 : 1;
    int rc = -1;
    PyObject *plan = NULL, *programs = NULL, *program = NULL, *stats = NULL, *readers = NULL, *outstanding = NULL, *holds = NULL;
    if ((plan = get(ledger, s_plan)) == NULL || (programs = get(ledger, s_import_programs)) == NULL)
        goto done;
    program = PyDict_Check(programs) ? PyDict_GetItemWithError(programs, consumer) : NULL;
    if (program == NULL && PyErr_Occurred()) goto done;
    Py_XINCREF(program);
    if (program != NULL) {
        int t = attr_is(program, s_plan, plan);
        if (t < 0) goto done;
        if (!t) Py_CLEAR(program);
    }
    if (program == NULL && (program = method2(ledger, s__import_program, plan, consumer)) == NULL) goto done;
    if ((stats = get(ledger, s_out_stats)) == NULL || run_import_program(program, stats) < 0) goto done;
    if (key != Py_None && notify_read(ledger, key, consumer) < 0) goto done; /* (an observer registered meanwhile) */
    if ((readers = get(ledger, s_readers)) == NULL || PyObject_SetItem(readers, consumer, Py_None) < 0) goto done;
    if ((outstanding = get(ledger, s_outstanding)) == NULL || PyObject_SetItem(outstanding, consumer, Py_None) < 0)
        goto done;
    if (escapes && set(ledger, s_escaped, Py_True) < 0) goto done;
    if ((holds = get(ledger, s_holds)) == NULL) goto done;
    int held = PySequence_Contains(holds, consumer);
    if (held < 0) goto done;
    if (!held && call_ok(PyObject_CallMethodOneArg(ledger, s__hold, consumer)) < 0) goto done;
    rc = 0;
done:
    Py_XDECREF(plan);
    Py_XDECREF(programs);
    Py_XDECREF(program);
    Py_XDECREF(stats);
    Py_XDECREF(readers);
    Py_XDECREF(outstanding);
    Py_XDECREF(holds);
    return rc;
}

const char import_output_doc[] = (
"import_output(image, stream) -> capsule | None\n\n"
"SafeImage.__dlpack__(stream=stream) in C for a consumer stream the effect's ledger knows by its handle\n"
"(or stream None or -1: the default consumer): the consumer ordered after the SDK's writes by the\n"
"import's bound fences, the reader and the view recorded, the capsule handed out. None (nothing done)\n"
"for anything else (a consumed or stale output, an unknown stream, observers, another thread holding\n"
"the effect): the Python method then does it, or raises. Does not block the host.");

PyObject *native_import_output(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.import_output(image, stream)");
        return NULL;
    }
    if (!bound_) {
        PyErr_SetString(PyExc_RuntimeError, "streamsafe._native.import_output: bind_replay() was not called");
        return NULL;
    }
    SECTION_START();
    PyObject *image = args[0], *stream = args[1];
    if (!Py_IS_TYPE(image, (PyTypeObject *)g_safe_image)) Py_RETURN_NONE;
    PyObject *observers = PyObject_GetAttr(g_hooks, s_observers);
    if (observers == NULL) return NULL;
    int t = PyObject_IsTrue(observers);
    Py_DECREF(observers);
    if (t != 0) return t < 0 ? NULL : Py_NewRef(Py_None);
    for (int i = 0; i < IMAGE_NSLOTS; i++) /* (a slot deleted: the Python method raises its AttributeError) */
        if (slot_get(image, i) == NULL) Py_RETURN_NONE;
    if (slot_get(image, I_CONSUMED) != Py_False) Py_RETURN_NONE;
    PyObject *ledger = Py_NewRef(slot_get(image, I_LEDGER)), *generation = Py_NewRef(slot_get(image, I_GENERATION));
    PyObject *capsule = Py_NewRef(slot_get(image, I_CAPSULE));
    int escapes = slot_get(image, I_ESCAPES) == Py_True;
    PyObject *result = NULL, *consumer = NULL, *key = NULL, *calls = NULL, *outer_owner = NULL, *outer_closing = NULL;
    int held = 0;
    if (capsule == Py_None) goto nothing; /* (None is this call's "not done") */
    PyObject *now = get(ledger, s_generation);
    if (now == NULL) goto fail;
    t = PyObject_RichCompareBool(now, generation, Py_EQ);
    Py_DECREF(now);
    if (t <= 0) {
        if (t < 0) goto fail;
        goto nothing;
    }
    SECTION(I_ENTRY);
    int overflow = 0;
    long value = PyLong_CheckExact(stream) ? PyLong_AsLongAndOverflow(stream, &overflow) : 0; /* (beyond a long: not -1) */
    if (value == -1 && !overflow && PyErr_Occurred()) goto fail;
    if (stream == Py_None || (PyLong_CheckExact(stream) && value == -1 && !overflow)) {
        consumer = Py_XNewRef(slot_get(image, I_DEFAULT_CONSUMER));
        if (consumer == NULL) goto nothing; /* (deleted meanwhile: the Python method raises its AttributeError) */
    } else if (PyLong_CheckExact(stream)) {
        PyObject *known = get(ledger, s_known);
        if (known == NULL) goto fail;
        consumer = PyDict_Check(known) ? PyDict_GetItemWithError(known, stream) : NULL;
        Py_XINCREF(consumer);
        Py_DECREF(known);
        if (consumer == NULL) {
            if (PyErr_Occurred()) goto fail;
            goto nothing;
        }
        if ((t = attr_true(consumer, s_thread)) < 0) goto fail;
        if (t) Py_SETREF(consumer, PyObject_CallOneArg(g_on_this_thread, consumer));
        if (consumer == NULL) goto fail;
    } else {
        goto nothing;
    }
    if (escapes) {
        if (Py_IS_TYPE(capsule, (PyTypeObject *)g_sim_capsule)) {
            key = PyObject_CallOneArg(g_capsule_data_key, capsule);
        } else {
            PyObject *argv[1] = {capsule};
            key = native_capsule_data(NULL, argv, 1);
        }
        if (key == NULL) goto fail;
    } else {
        key = Py_NewRef(Py_None);
    }
    SECTION(I_CONSUMER_STREAM);
    /* ledger.import_output(generation, consumer, escapes=escapes, key=key): the effect held */
    if ((t = try_hold(ledger, &calls, &held, &outer_owner, &outer_closing)) < 0) goto fail;
    if (!t) goto nothing; /* another thread holds the effect: the Python call waits for it, or raises */
    SECTION(I_HOLD);
    if ((t = import_held(ledger, generation, consumer, escapes, key)) < 0) goto fail;
    if (t > 0) goto nothing;
    SECTION(I_HELD);
    result = capsule; /* (a marker: imported; the view and the image's state come after the lock is let go) */
    goto release;
nothing:
    result = Py_None;
    goto release;
fail:
    result = NULL;
release:
    if (held && let_go(ledger, calls, outer_owner, outer_closing) < 0) result = NULL;
    SECTION(I_LET_GO);
    if (result == capsule) {
        /* ledger.add_view(key, generation) when a view escapes */
        if (escapes && key != Py_None) {
            PyObject *ref = NULL, *entry = NULL;
            if (PyDict_GET_SIZE(g_views) > 1024 && call_ok(PyObject_CallNoArgs(g_prune_views)) < 0) result = NULL;
            else if ((ref = PyWeakref_NewRef(ledger, NULL)) == NULL || (entry = PyTuple_Pack(2, ref, generation)) == NULL ||
                     PyDict_SetItem(g_views, key, entry) < 0)
                result = NULL;
            Py_XDECREF(ref);
            Py_XDECREF(entry);
        }
        if (result != NULL) {
            slot_set(image, I_CONSUMER, consumer);
            slot_set(image, I_CONSUMED, Py_True);
            if (Py_IS_TYPE(capsule, (PyTypeObject *)g_sim_capsule)) { /* on the model: the view is of this run's output */
                PyObject *ref = PyWeakref_NewRef(ledger, NULL), *of = ref == NULL ? NULL : PyTuple_Pack(2, ref, generation);
                if (of == NULL || PyObject_SetAttr(capsule, s_view_of, of) < 0) result = NULL;
                Py_XDECREF(ref);
                Py_XDECREF(of);
            }
        }
        Py_XINCREF(result);
        SECTION(I_STATE);
    } else if (result == Py_None) {
        Py_INCREF(result);
    }
    Py_XDECREF(ledger);
    Py_XDECREF(generation);
    Py_XDECREF(capsule);
    Py_XDECREF(consumer);
    Py_XDECREF(key);
    Py_XDECREF(calls);
    Py_XDECREF(outer_owner);
    Py_XDECREF(outer_closing);
    return result;
}

/* ---- the thread check (streamsafe.occupancy.note_run) ------------------------------------------------ */

static PyObject *o_module, *o_thread_token, *o_token;
static PyObject *s_WINDOW_S, *s_token, *s_is_alive, *s__seen, *s__clock, *s__get_ident, *s__current_thread;

const char bind_occupancy_doc[] = (
"bind_occupancy(module, thread_token, token) -> None\n\n"
"What note_run() works with: streamsafe.occupancy (its _seen, _clock, _get_ident, _current_thread and\n"
"WINDOW_S, read at each call as the Python function reads them), streamsafe.streams.thread_token, and the\n"
"thread-local whose .token it returns (read directly while _get_ident is that function). Process-wide.");

PyObject *native_bind_occupancy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.bind_occupancy(module, thread_token, token)");
        return NULL;
    }
    const char *names[] = {"WINDOW_S", "token", "is_alive", "_seen", "_clock", "_get_ident", "_current_thread"};
    PyObject **interned[] = {&s_WINDOW_S, &s_token, &s_is_alive, &s__seen, &s__clock, &s__get_ident, &s__current_thread};
    for (int i = 0; i < 7; i++)
        if (*interned[i] == NULL && (*interned[i] = PyUnicode_InternFromString(names[i])) == NULL) return NULL;
    PyObject **slots[] = {&o_module, &o_thread_token, &o_token};
    for (int i = 0; i < 3; i++) Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    Py_RETURN_NONE;
}

const char note_run_doc[] = (
"note_run(device) -> bool\n\n"
"streamsafe.occupancy.note_run in C: records a guarded run on `device` by this thread; True when another\n"
"live thread ran a guarded effect there since this thread's previous run (within WINDOW_S seconds).\n"
"Does not block.");

/* an entry of _seen: (time, thread), its time as a double; -1 with an exception for anything else */
static int entry_time(PyObject *entry, double *out) {
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.note_run: an entry of occupancy._seen must be (time, thread)");
        return -1;
    }
    *out = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 0));
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

PyObject *native_note_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.note_run(device)");
        return NULL;
    }
    if (o_module == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "streamsafe._native.note_run: bind_occupancy() was not called");
        return NULL;
    }
    PyObject *device = args[0], *result = NULL, *seen = NULL, *clock = NULL, *now = NULL, *threads = NULL, *get_ident = NULL;
    PyObject *ident = NULL, *thread = NULL, *entry = NULL, *items = NULL, *window = NULL;
    double previous = 0.0, t_now, t_window;
    if ((seen = PyObject_GetAttr(o_module, s__seen)) == NULL || (clock = PyObject_GetAttr(o_module, s__clock)) == NULL) goto done;
    if ((now = PyObject_CallNoArgs(clock)) == NULL) goto done;
    if ((t_now = PyFloat_AsDouble(now)) == -1.0 && PyErr_Occurred()) goto done;
    if (!PyDict_CheckExact(seen)) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.note_run: occupancy._seen must be a dict");
        goto done;
    }
    threads = Py_XNewRef(PyDict_GetItemWithError(seen, device));
    if (threads == NULL) {
        if (PyErr_Occurred()) goto done;
        PyObject *fresh = PyDict_New();
        if (fresh == NULL) goto done;
        threads = Py_XNewRef(PyDict_SetDefault(seen, device, fresh));
        Py_DECREF(fresh);
        if (threads == NULL) goto done;
    }
    if (!PyDict_Check(threads)) {
        PyErr_SetString(PyExc_TypeError, "streamsafe._native.note_run: occupancy._seen must map devices to dicts");
        goto done;
    }
    if ((get_ident = PyObject_GetAttr(o_module, s__get_ident)) == NULL) goto done;
    ident = get_ident == o_thread_token ? PyObject_GetAttr(o_token, s_token) : PyObject_CallNoArgs(get_ident);
    if (ident == NULL) goto done;
    PyObject *mine = Py_XNewRef(PyDict_GetItemWithError(threads, ident));
    if (mine == NULL && PyErr_Occurred()) goto done;
    if (mine != NULL) {
        int bad = entry_time(mine, &previous) < 0;
        if (!bad) thread = Py_NewRef(PyTuple_GET_ITEM(mine, 1));
        Py_DECREF(mine);
        if (bad) goto done;
    } else {
        PyObject *current_thread = PyObject_GetAttr(o_module, s__current_thread);
        if (current_thread == NULL) goto done;
        thread = PyObject_CallNoArgs(current_thread);
        Py_DECREF(current_thread);
        if (thread == NULL) goto done;
    }
    if ((entry = PyTuple_Pack(2, now, thread)) == NULL || PyDict_SetItem(threads, ident, entry) < 0) goto done;
    if (PyDict_GET_SIZE(threads) == 1) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    if ((window = PyObject_GetAttr(o_module, s_WINDOW_S)) == NULL) goto done;
    if ((t_window = PyFloat_AsDouble(window)) == -1.0 && PyErr_Occurred()) goto done;
    if ((items = PyDict_Items(threads)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *other = PyTuple_GET_ITEM(item, 0), *value = PyTuple_GET_ITEM(item, 1);
        int same = PyObject_RichCompareBool(other, ident, Py_EQ);
        if (same < 0) goto done;
        if (same) continue;
        double last;
        if (entry_time(value, &last) < 0) goto done;
        if (t_now - last > t_window) { /* quiet: it no longer counts */
            if (PyDict_DelItem(threads, other) < 0) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto done;
                PyErr_Clear();
            }
        } else if (last >= previous) { /* it ran since this thread's previous run: shared, if it still lives */
            PyObject *alive = PyObject_CallMethodNoArgs(PyTuple_GET_ITEM(value, 1), s_is_alive);
            if (alive == NULL) goto done;
            int yes = PyObject_IsTrue(alive);
            Py_DECREF(alive);
            if (yes < 0) goto done;
            if (yes) {
                result = Py_NewRef(Py_True);
                goto done;
            }
            if (PyDict_DelItem(threads, other) < 0) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError)) goto done;
                PyErr_Clear();
            }
        }
    }
    result = Py_NewRef(Py_False);
done:
    Py_XDECREF(seen);
    Py_XDECREF(clock);
    Py_XDECREF(now);
    Py_XDECREF(threads);
    Py_XDECREF(get_ident);
    Py_XDECREF(ident);
    Py_XDECREF(thread);
    Py_XDECREF(entry);
    Py_XDECREF(items);
    Py_XDECREF(window);
    return result;
}
