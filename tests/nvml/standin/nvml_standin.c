/*
 * A stand-in libnvidia-ml.so.1 for machines without an NVIDIA GPU.
 *
 * It exports the NVML entry points preflight reaches through nvidia-ml-py's pynvml, with nvml.h's
 * signatures, struct layouts, struct versions and return codes, and answers them from a node
 * description: a JSON file named by PREFLIGHT_NVML_STANDIN (tests/nvml/descriptions/, converted from
 * real `nvidia-smi -q` readings by tests/nvml/describe.py), or nvml-standin.json in the directory
 * this library was loaded from.
 *
 * A function this file does not define is absent from the library, as it is from a driver older
 * than the function: pynvml's dlsym lookup fails and it raises NVMLError_FunctionNotFound. A
 * description can also make a defined function answer NVML_ERROR_FUNCTION_NOT_FOUND
 * ("missing_functions"), and any device function answer another code ("errors").
 *
 * Description (every key optional; a value that is absent or null answers NOT_SUPPORTED):
 *   init_error            an error name (DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH ...) nvmlInit returns
 *   driver_version, nvml_version, cuda_driver_version (1000 * major + 10 * minor)
 *   missing_functions     [function names] answering FUNCTION_NOT_FOUND
 *   gpus: [{name, uuid, serial, vbios_version, minor_number,
 *           pci {bus_id, domain, bus, device, pci_device_id, pci_subsystem_id},
 *           pcie {gen_current, gen_max, gen_gpu_max, width_current, width_max},
 *           memory {total, free, used, reserved} (bytes), utilization {gpu, memory},
 *           processes [{pid, type (C, G or C+G), used_memory, name}], persistence_mode,
 *           ecc {current, pending, volatile {corrected, uncorrected}, aggregate {corrected, uncorrected}},
 *           retired_pages {sbe, dbe (page addresses, or a count), pending},
 *           remapped_rows {correctable, uncorrectable, pending, failure},
 *           clocks {graphics, sm, memory, video}, max_clocks {...} (MHz), clocks_event_reasons (mask),
 *           temperature {gpu, shutdown, slowdown, gpu_max, margin},
 *           field_values {"<NVML_FI id>": int}, power {usage_mw, enforced_limit_mw},
 *           nvlink [{active, remote_bus_id}], mig {current, pending},
 *           errors {function: error name}, lost {after_calls: N} or {from_call: function}}]
 */

#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* nvml.h: return codes */
typedef enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24U))

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct nvmlMarginTemperature_v1_st {
    unsigned int version;
    int marginTemperature;
} nvmlMarginTemperature_t;
#define nvmlMarginTemperature_v1 NVML_STRUCT_VERSION(sizeof(nvmlMarginTemperature_t), 1)

typedef enum {
    NVML_VALUE_TYPE_DOUBLE = 0,
    NVML_VALUE_TYPE_UNSIGNED_INT = 1,
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
    NVML_VALUE_TYPE_SIGNED_INT = 5,
} nvmlValueType_t;

typedef union nvmlValue_st {
    double dVal;
    int siVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlFieldValue_st {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    nvmlValueType_t valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* Field ids whose values are signed (the temperature margins); the others are read as unsigned. */
#define NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT 193
#define NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT 194
#define NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT 195
#define NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT 196

typedef struct standin_device *nvmlDevice_t;

#define MAX_GPUS 64

struct standin_device {
    unsigned int index;
    cJSON *desc;
    long calls;
    int lost;
};

static cJSON *root;
static struct standin_device devices[MAX_GPUS];
static unsigned int device_count;
static int init_count;

/* ----------------------------------------------------------------------------- error codes */

static const struct {
    nvmlReturn_t code;
    const char *name;
    const char *text; /* nvmlErrorString's text, as the real library gives it */
} ERRORS[] = {
    {NVML_SUCCESS, "SUCCESS", "Success"},
    {NVML_ERROR_UNINITIALIZED, "UNINITIALIZED", "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "INVALID_ARGUMENT", "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "NOT_SUPPORTED", "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "NO_PERMISSION", "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "ALREADY_INITIALIZED", "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "NOT_FOUND", "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "TIMEOUT", "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "IRQ_ISSUE", "Interrupt Request Issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST", "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "RESET_REQUIRED", "GPU requires restart"},
    {NVML_ERROR_OPERATING_SYSTEM, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {NVML_ERROR_IN_USE, "IN_USE", "In use by another client"},
    {NVML_ERROR_MEMORY, "MEMORY", "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "NO_DATA", "No data"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "INSUFFICIENT_RESOURCES", "Ran out of critical resources, other than memory"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "ARGUMENT_VERSION_MISMATCH", "Struct version mismatch"},
    {NVML_ERROR_NOT_READY, "NOT_READY", "Not Ready"},
    {NVML_ERROR_GPU_NOT_FOUND, "GPU_NOT_FOUND", "GPU not found"},
    {NVML_ERROR_UNKNOWN, "UNKNOWN", "Unknown Error"},
};

static nvmlReturn_t code_of(const char *name) {
    for (size_t i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++)
        if (strcasecmp(ERRORS[i].name, name) == 0) return ERRORS[i].code;
    return NVML_ERROR_UNKNOWN;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++)
        if (ERRORS[i].code == result) return ERRORS[i].text;
    return "Unknown Error";
}

/* ----------------------------------------------------------------------------- the description */

static cJSON *get(const cJSON *object, const char *key) {
    cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    return (item == NULL || cJSON_IsNull(item)) ? NULL : item;
}

static cJSON *path2(const cJSON *object, const char *a, const char *b) {
    cJSON *first = object ? get(object, a) : NULL;
    return first && b ? get(first, b) : first;
}

static int in_list(const cJSON *list, const char *name) {
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        if (cJSON_IsString(item) && strcmp(item->valuestring, name) == 0) return 1;
    }
    return 0;
}

/* The node description: PREFLIGHT_NVML_STANDIN, else nvml-standin.json beside this library (a node
   whose system library directory holds both, as a driver installed on that node only). */
static const char *description_path(char *buffer, size_t size) {
    const char *path = getenv("PREFLIGHT_NVML_STANDIN");
    if (path && *path) return path;
    Dl_info info;
    if (!dladdr((void *)&description_path, &info) || !info.dli_fname) return NULL;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash) return NULL;
    snprintf(buffer, size, "%.*s/nvml-standin.json", (int)(slash - info.dli_fname), info.dli_fname);
    return buffer;
}

static nvmlReturn_t load(void) {
    if (root) return NVML_SUCCESS;
    char beside[4096];
    const char *path = description_path(beside, sizeof(beside));
    if (!path) return NVML_ERROR_DRIVER_NOT_LOADED; /* no node described: no driver */
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "nvml stand-in: cannot open %s\n", path);
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[got] = 0;
    root = cJSON_Parse(text);
    free(text);
    if (!root) {
        fprintf(stderr, "nvml stand-in: %s is not JSON\n", path);
        return NVML_ERROR_UNKNOWN;
    }
    const cJSON *gpus = get(root, "gpus"), *gpu;
    device_count = 0;
    cJSON_ArrayForEach(gpu, gpus) {
        if (device_count == MAX_GPUS) break;
        devices[device_count].index = device_count;
        devices[device_count].desc = (cJSON *)gpu;
        device_count++;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t system_call(const char *function) {
    if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
    if (in_list(get(root, "missing_functions"), function)) return NVML_ERROR_FUNCTION_NOT_FOUND;
    return NVML_SUCCESS;
}

/* Every device function starts here: the handle, initialisation, a lost GPU, a forced error. */
static nvmlReturn_t device_call(nvmlDevice_t device, const char *function) {
    nvmlReturn_t ret = system_call(function);
    if (ret != NVML_SUCCESS) return ret;
    if (device < devices || device >= devices + device_count) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *lost = get(device->desc, "lost");
    device->calls++;
    if (lost) {
        const cJSON *after = get(lost, "after_calls"), *from = get(lost, "from_call");
        if (after && cJSON_IsNumber(after) && device->calls > after->valuedouble) device->lost = 1;
        if (from && cJSON_IsString(from) && strcmp(from->valuestring, function) == 0) device->lost = 1;
    }
    if (device->lost) return NVML_ERROR_GPU_IS_LOST;
    const cJSON *forced = path2(device->desc, "errors", function);
    if (forced && cJSON_IsString(forced)) return code_of(forced->valuestring);
    return NVML_SUCCESS;
}

#define DEVICE_CALL(device)                                   \
    do {                                                      \
        nvmlReturn_t entry_ = device_call(device, __func__);  \
        if (entry_ != NVML_SUCCESS) return entry_;            \
    } while (0)

static nvmlReturn_t uint_at(const cJSON *value, unsigned int *out) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (!value || !(cJSON_IsNumber(value) || cJSON_IsBool(value))) return NVML_ERROR_NOT_SUPPORTED;
    *out = cJSON_IsBool(value) ? (unsigned int)cJSON_IsTrue(value) : (unsigned int)value->valuedouble;
    return NVML_SUCCESS;
}

static nvmlReturn_t ull_at(const cJSON *value, unsigned long long *out) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (!value || !cJSON_IsNumber(value)) return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned long long)value->valuedouble;
    return NVML_SUCCESS;
}

static nvmlReturn_t text_at(const cJSON *value, char *out, unsigned int length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (!value || !cJSON_IsString(value)) return NVML_ERROR_NOT_SUPPORTED;
    if (strlen(value->valuestring) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value->valuestring);
    return NVML_SUCCESS;
}

/* ----------------------------------------------------------------------------- init, system */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t ret = load();
    if (ret != NVML_SUCCESS) return ret;
    const cJSON *failure = get(root, "init_error");
    if (failure && cJSON_IsString(failure)) return code_of(failure->valuestring);
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (init_count <= 0) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t ret = system_call(__func__);
    return ret != NVML_SUCCESS ? ret : text_at(get(root, "driver_version"), version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t ret = system_call(__func__);
    return ret != NVML_SUCCESS ? ret : text_at(get(root, "nvml_version"), version, length);
}

static nvmlReturn_t cuda_driver_version(const char *function, int *version) {
    nvmlReturn_t ret = system_call(function);
    if (ret != NVML_SUCCESS) return ret;
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *value = get(root, "cuda_driver_version");
    if (!value || !cJSON_IsNumber(value)) return NVML_ERROR_LIBRARY_NOT_FOUND; /* libcuda.so absent */
    *version = value->valueint;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) { return cuda_driver_version(__func__, version); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return cuda_driver_version(__func__, version); }

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    nvmlReturn_t ret = system_call(__func__);
    if (ret != NVML_SUCCESS) return ret;
    for (unsigned int i = 0; i < device_count; i++) {
        const cJSON *proc;
        cJSON_ArrayForEach(proc, get(devices[i].desc, "processes")) {
            const cJSON *p = get(proc, "pid");
            if (p && (unsigned int)p->valuedouble == pid) return text_at(get(proc, "name"), name, length);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* ----------------------------------------------------------------------------- handles */

static nvmlReturn_t device_count_of(const char *function, unsigned int *count) {
    nvmlReturn_t ret = system_call(function);
    if (ret != NVML_SUCCESS) return ret;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { return device_count_of(__func__, count); }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return device_count_of(__func__, count); }

static nvmlReturn_t handle_by_index(const char *function, unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t ret = system_call(function);
    if (ret != NVML_SUCCESS) return ret;
    if (!device || index >= device_count) return NVML_ERROR_INVALID_ARGUMENT;
    ret = device_call(&devices[index], function);
    if (ret != NVML_SUCCESS) return ret;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(__func__, index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(__func__, index, device);
}

static nvmlReturn_t handle_by(const char *function, const char *key, const char *sub, const char *wanted,
                              nvmlDevice_t *device) {
    nvmlReturn_t ret = system_call(function);
    if (ret != NVML_SUCCESS) return ret;
    if (!wanted || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < device_count; i++) {
        const cJSON *value = path2(devices[i].desc, key, sub);
        if (value && cJSON_IsString(value) && strcasecmp(value->valuestring, wanted) == 0) {
            ret = device_call(&devices[i], function);
            if (ret != NVML_SUCCESS) return ret;
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    return handle_by(__func__, "uuid", NULL, uuid, device);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) {
    return handle_by(__func__, "pci", "bus_id", bus_id, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    DEVICE_CALL(device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    DEVICE_CALL(device);
    return uint_at(get(device->desc, "minor_number"), minor);
}

/* ----------------------------------------------------------------------------- identity */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE_CALL(device);
    return text_at(get(device->desc, "name"), name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEVICE_CALL(device);
    return text_at(get(device->desc, "uuid"), uuid, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    DEVICE_CALL(device);
    return text_at(get(device->desc, "serial"), serial, length);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    DEVICE_CALL(device);
    return text_at(get(device->desc, "vbios_version"), version, length);
}

/* ----------------------------------------------------------------------------- PCI */

static nvmlReturn_t fill_pci(const cJSON *pci, nvmlPciInfo_t *info) {
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *bus_id = get(pci, "bus_id");
    if (!pci || !bus_id || !cJSON_IsString(bus_id)) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof(*info));
    snprintf(info->busId, sizeof(info->busId), "%s", bus_id->valuestring);
    /* The legacy field holds the 4-digit-domain form: 0000:19:00.0 */
    const char *legacy = bus_id->valuestring;
    if (strlen(legacy) > 12) legacy += strlen(legacy) - 12;
    snprintf(info->busIdLegacy, sizeof(info->busIdLegacy), "%s", legacy);
    uint_at(get(pci, "domain"), &info->domain);
    uint_at(get(pci, "bus"), &info->bus);
    uint_at(get(pci, "device"), &info->device);
    uint_at(get(pci, "pci_device_id"), &info->pciDeviceId);
    uint_at(get(pci, "pci_subsystem_id"), &info->pciSubSystemId);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE_CALL(device);
    return fill_pci(get(device->desc, "pci"), pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE_CALL(device);
    return fill_pci(get(device->desc, "pci"), pci);
}

#define PCIE_GETTER(function, key)                                        \
    nvmlReturn_t function(nvmlDevice_t device, unsigned int *value) {     \
        DEVICE_CALL(device);                                              \
        return uint_at(path2(device->desc, "pcie", key), value);          \
    }

PCIE_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, "gen_current")
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, "gen_max")
PCIE_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, "gen_gpu_max")
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkWidth, "width_current")
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkWidth, "width_max")

/* ----------------------------------------------------------------------------- memory, processes */

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    DEVICE_CALL(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *m = get(device->desc, "memory");
    if (!m) return NVML_ERROR_NOT_SUPPORTED;
    nvmlMemory_t out = {0, 0, 0};
    nvmlReturn_t ret = ull_at(get(m, "total"), &out.total);
    if (ret == NVML_SUCCESS) ret = ull_at(get(m, "free"), &out.free);
    if (ret == NVML_SUCCESS) ret = ull_at(get(m, "used"), &out.used);
    if (ret == NVML_SUCCESS) *memory = out;
    return ret;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    DEVICE_CALL(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const cJSON *m = get(device->desc, "memory");
    if (!m) return NVML_ERROR_NOT_SUPPORTED;
    nvmlMemory_v2_t out = {nvmlMemory_v2, 0, 0, 0, 0};
    nvmlReturn_t ret = ull_at(get(m, "total"), &out.total);
    if (ret == NVML_SUCCESS) ret = ull_at(get(m, "free"), &out.free);
    if (ret == NVML_SUCCESS) ret = ull_at(get(m, "used"), &out.used);
    if (ret == NVML_SUCCESS) ull_at(get(m, "reserved"), &out.reserved);
    if (ret == NVML_SUCCESS) *memory = out;
    return ret;
}

/* The processes of one kind: 'C' compute, 'G' graphics ("C+G" is both, as nvidia-smi prints it). */
static nvmlReturn_t processes(nvmlDevice_t device, char kind, unsigned int *count, nvmlProcessInfo_t *infos) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *list = get(device->desc, "processes"), *proc;
    if (!list) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = 0;
    cJSON_ArrayForEach(proc, list) {
        const cJSON *type = get(proc, "type");
        if (!type || !cJSON_IsString(type) || strchr(type->valuestring, kind)) n++;
    }
    if (n == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (!infos || *count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int i = 0;
    cJSON_ArrayForEach(proc, list) {
        const cJSON *type = get(proc, "type");
        if (type && cJSON_IsString(type) && !strchr(type->valuestring, kind)) continue;
        memset(&infos[i], 0, sizeof(infos[i]));
        uint_at(get(proc, "pid"), &infos[i].pid);
        if (ull_at(get(proc, "used_memory"), &infos[i].usedGpuMemory) != NVML_SUCCESS)
            infos[i].usedGpuMemory = 0xFFFFFFFFFFFFFFFFULL; /* NVML_VALUE_NOT_AVAILABLE */
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF;
        i++;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return processes(device, 'C', count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos) {
    DEVICE_CALL(device);
    return processes(device, 'G', count, infos);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    DEVICE_CALL(device);
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *u = get(device->desc, "utilization");
    nvmlUtilization_t out;
    nvmlReturn_t ret = uint_at(get(u, "gpu"), &out.gpu);
    if (ret == NVML_SUCCESS) ret = uint_at(get(u, "memory"), &out.memory);
    if (ret == NVML_SUCCESS) *utilization = out;
    return ret;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode) {
    DEVICE_CALL(device);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int value;
    nvmlReturn_t ret = uint_at(get(device->desc, "persistence_mode"), &value);
    if (ret == NVML_SUCCESS) *mode = value ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return ret;
}

/* ----------------------------------------------------------------------------- ECC, pages, rows */

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending) {
    DEVICE_CALL(device);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int now, next;
    nvmlReturn_t ret = uint_at(path2(device->desc, "ecc", "current"), &now);
    if (ret == NVML_SUCCESS) ret = uint_at(path2(device->desc, "ecc", "pending"), &next);
    if (ret != NVML_SUCCESS) return ret;
    *current = now ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = next ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* errorType: 0 corrected, 1 uncorrected; counterType: 0 volatile, 1 aggregate */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType, unsigned long long *count) {
    DEVICE_CALL(device);
    if (!count || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *ecc = get(device->desc, "ecc");
    unsigned int enabled;
    if (uint_at(get(ecc, "current"), &enabled) != NVML_SUCCESS || !enabled)
        return NVML_ERROR_NOT_SUPPORTED; /* no ECC, or ECC off: no counters */
    const cJSON *counters = get(ecc, counterType ? "aggregate" : "volatile");
    return ull_at(get(counters, errorType ? "uncorrected" : "corrected"), count);
}

/* cause: 0 multiple single-bit ECC errors, 1 a double-bit ECC error */
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount, unsigned long long *addresses) {
    DEVICE_CALL(device);
    if (!pageCount || cause < 0 || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *pages = get(device->desc, "retired_pages");
    if (!pages) return NVML_ERROR_NOT_SUPPORTED;
    /* A list of page addresses, or a count: `nvidia-smi -q` gives counts only, and then the
       addresses answered are the pages' ordinals. */
    const cJSON *list = get(pages, cause ? "dbe" : "sbe");
    if (!list || !(cJSON_IsArray(list) || cJSON_IsNumber(list))) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = cJSON_IsNumber(list) ? (unsigned int)list->valuedouble : (unsigned int)cJSON_GetArraySize(list);
    if (!addresses || *pageCount < n) {
        *pageCount = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned int i = 0; i < n; i++) {
        const cJSON *address = cJSON_IsArray(list) ? cJSON_GetArrayItem(list, (int)i) : NULL;
        addresses[i] = address ? (unsigned long long)address->valuedouble : i;
    }
    *pageCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending) {
    DEVICE_CALL(device);
    if (!isPending) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int value;
    nvmlReturn_t ret = uint_at(path2(device->desc, "retired_pages", "pending"), &value);
    if (ret == NVML_SUCCESS) *isPending = value ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return ret;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
    DEVICE_CALL(device);
    if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *rows = get(device->desc, "remapped_rows");
    if (!rows) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int values[4];
    const char *keys[4] = {"correctable", "uncorrectable", "pending", "failure"};
    for (int i = 0; i < 4; i++) {
        nvmlReturn_t ret = uint_at(get(rows, keys[i]), &values[i]);
        if (ret != NVML_SUCCESS) return ret;
    }
    *corrRows = values[0];
    *uncRows = values[1];
    *isPending = values[2];
    *failureOccurred = values[3];
    return NVML_SUCCESS;
}

/* ----------------------------------------------------------------------------- clocks */

static const char *CLOCKS[] = {"graphics", "sm", "memory", "video"}; /* nvmlClockType_t 0..3 */

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    DEVICE_CALL(device);
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_at(path2(device->desc, "clocks", CLOCKS[type]), clock);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned int *clock) {
    DEVICE_CALL(device);
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    return uint_at(path2(device->desc, "max_clocks", CLOCKS[type]), clock);
}

static nvmlReturn_t event_reasons(nvmlDevice_t device, unsigned long long *reasons) {
    return ull_at(get(device->desc, "clocks_event_reasons"), reasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons) {
    DEVICE_CALL(device);
    return event_reasons(device, reasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons) {
    DEVICE_CALL(device);
    return event_reasons(device, reasons);
}

/* ----------------------------------------------------------------------------- temperature, power */

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    DEVICE_CALL(device);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU is the only sensor */
    return uint_at(path2(device->desc, "temperature", "gpu"), temp);
}

/* nvmlTemperatureThresholds_t: 0 shutdown, 1 slowdown, 2 mem max, 3 gpu max */
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int threshold, unsigned int *temp) {
    static const char *keys[] = {"shutdown", "slowdown", "mem_max", "gpu_max"};
    DEVICE_CALL(device);
    if (threshold < 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (threshold > 3) return NVML_ERROR_NOT_SUPPORTED;
    return uint_at(path2(device->desc, "temperature", keys[threshold]), temp);
}

nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *margin) {
    DEVICE_CALL(device);
    if (!margin) return NVML_ERROR_INVALID_ARGUMENT;
    if (margin->version != nvmlMarginTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const cJSON *value = path2(device->desc, "temperature", "margin");
    if (!value || !cJSON_IsNumber(value)) return NVML_ERROR_NOT_SUPPORTED;
    margin->marginTemperature = value->valueint;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    DEVICE_CALL(device);
    if (valuesCount < 0 || (valuesCount > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *fields = get(device->desc, "field_values");
    for (int i = 0; i < valuesCount; i++) {
        char key[16];
        snprintf(key, sizeof(key), "%u", values[i].fieldId);
        const cJSON *value = fields ? get(fields, key) : NULL;
        values[i].timestamp = 0;
        values[i].latencyUsec = 0;
        if (!value || !cJSON_IsNumber(value)) {
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        values[i].nvmlReturn = NVML_SUCCESS;
        switch (values[i].fieldId) {
        case NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT:
        case NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT:
        case NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT:
        case NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT:
            values[i].valueType = NVML_VALUE_TYPE_SIGNED_INT;
            values[i].value.siVal = value->valueint;
            break;
        default:
            values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            values[i].value.ullVal = (unsigned long long)value->valuedouble;
        }
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    DEVICE_CALL(device);
    return uint_at(path2(device->desc, "power", "usage_mw"), power);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE_CALL(device);
    return uint_at(path2(device->desc, "power", "enforced_limit_mw"), limit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    DEVICE_CALL(device);
    return uint_at(path2(device->desc, "power", "enforced_limit_mw"), limit);
}

/* ----------------------------------------------------------------------------- NVLink, MIG */

static nvmlReturn_t nvlink(nvmlDevice_t device, unsigned int link, const cJSON **out) {
    const cJSON *links = get(device->desc, "nvlink");
    if (!links || cJSON_GetArraySize(links) == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (unsigned int)cJSON_GetArraySize(links)) return NVML_ERROR_INVALID_ARGUMENT;
    *out = cJSON_GetArrayItem(links, (int)link);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) {
    DEVICE_CALL(device);
    if (!isActive) return NVML_ERROR_INVALID_ARGUMENT;
    const cJSON *entry;
    nvmlReturn_t ret = nvlink(device, link, &entry);
    if (ret != NVML_SUCCESS) return ret;
    unsigned int active;
    ret = uint_at(get(entry, "active"), &active);
    if (ret == NVML_SUCCESS) *isActive = active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return ret;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci) {
    DEVICE_CALL(device);
    const cJSON *entry;
    nvmlReturn_t ret = nvlink(device, link, &entry);
    if (ret != NVML_SUCCESS) return ret;
    const cJSON *remote = get(entry, "remote_bus_id");
    if (!remote) return NVML_ERROR_NOT_SUPPORTED;
    cJSON *wrapper = cJSON_CreateObject();
    cJSON_AddStringToObject(wrapper, "bus_id", remote->valuestring);
    ret = fill_pci(wrapper, pci);
    cJSON_Delete(wrapper);
    return ret;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    DEVICE_CALL(device);
    if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int now, next;
    nvmlReturn_t ret = uint_at(path2(device->desc, "mig", "current"), &now);
    if (ret == NVML_SUCCESS) ret = uint_at(path2(device->desc, "mig", "pending"), &next);
    if (ret != NVML_SUCCESS) return ret;
    *currentMode = now;
    *pendingMode = next;
    return NVML_SUCCESS;
}
