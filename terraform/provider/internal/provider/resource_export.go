package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newExportResource() resource.Resource { return &exportResource{} }

type exportResource struct{ base }

type exportModel struct {
	ID              types.String `tfsdk:"id"`
	Tenant          types.String `tfsdk:"tenant"`
	Name            types.String `tfsdk:"name"`
	Topic           types.String `tfsdk:"topic"`
	ValueFormat     types.String `tfsdk:"value_format"`
	Fields          types.List   `tfsdk:"fields"`
	PartitionBy     types.List   `tfsdk:"partition_by"`
	TargetURI       types.String `tfsdk:"target_uri"`
	IncludeLanes    types.Bool   `tfsdk:"include_lanes"`
	ScheduleKind    types.String `tfsdk:"schedule_kind"`
	IntervalMinutes types.Int64  `tfsdk:"interval_minutes"`
	Cron            types.String `tfsdk:"cron"`
	Enabled         types.Bool   `tfsdk:"enabled"`
}

type exportJSON struct {
	Tenant          string      `json:"tenant"`
	Name            string      `json:"name"`
	Topic           string      `json:"topic"`
	ValueFormat     string      `json:"value_format"`
	Fields          []fieldJSON `json:"fields"`
	PartitionBy     []string    `json:"partition_by"`
	TargetURI       string      `json:"target_uri"`
	IncludeLanes    bool        `json:"include_lanes"`
	ScheduleKind    string      `json:"schedule_kind"`
	IntervalMinutes *int64      `json:"interval_minutes"`
	Cron            string      `json:"cron"`
	Enabled         bool        `json:"enabled"`
}

func (r *exportResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_export"
}

func (r *exportResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A Parquet export of a tiered topic (`remote_storage = true`): its sealed segments written to " +
			"`target_uri` exactly once, on request, on a schedule or continuously. Destroying it keeps the files. " +
			"Changing `tenant`, `name` or `topic` replaces it; everything else changes in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "`<tenant>/<name>`."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The export's name."},
			"topic": schema.StringAttribute{Required: true,
				PlanModifiers: []planmodifier.String{otherTopic("Another topic replaces the export.")},
				Description:   "The topic: its full name, `<tenant>.<topic>`, or its name in the tenant; naming the same topic the other way changes nothing."},
			"value_format": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Validators:  []validator.String{stringvalidator.OneOf("json", "raw")},
				Description: "`json` (default: columns read from JSON values) or `raw` (the bytes)."},
			"fields": fieldsAttribute(false, "The columns read from JSON values (none: inferred).", nil),
			"partition_by": schema.ListAttribute{Optional: true, ElementType: types.StringType,
				Validators:  []validator.List{listvalidator.ValueStringsAre(stringvalidator.OneOf("date", "hour"))},
				Description: "Directory columns, of `date` and `hour`."},
			"target_uri": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Description: "A folder path or URI under the platform's allowed prefixes; default: the first of them plus the name."},
			"include_lanes": schema.BoolAttribute{Optional: true, Computed: true, PlanModifiers: keepBool,
				Description: "Export the topic's lane topics too."},
			"schedule_kind": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Validators:  []validator.String{stringvalidator.OneOf("manual", "interval", "cron", "continuous")},
				Description: "`manual` (default), `interval` (with `interval_minutes`), `cron` (with `cron`) or `continuous`."},
			"interval_minutes": schema.Int64Attribute{Optional: true,
				Description: "With `schedule_kind = \"interval\"`."},
			"cron": schema.StringAttribute{Optional: true,
				Description: "With `schedule_kind = \"cron\"`: a five-field cron expression."},
			"enabled": schema.BoolAttribute{Optional: true, Computed: true, PlanModifiers: keepBool,
				Description: "false stops scheduled runs (a run by hand still goes)."},
		},
	}
}

func (r *exportResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func exportState(e exportJSON, named types.String) exportModel {
	partitionBy := types.ListNull(types.StringType)
	if len(e.PartitionBy) > 0 {
		partitionBy = listOf(e.PartitionBy)
	}
	return exportModel{
		ID:              types.StringValue(e.Tenant + "/" + e.Name),
		Tenant:          types.StringValue(e.Tenant),
		Name:            types.StringValue(e.Name),
		Topic:           topicAsNamed(e.Tenant, e.Topic, named),
		ValueFormat:     types.StringValue(e.ValueFormat),
		Fields:          fieldsValue(e.Fields),
		PartitionBy:     partitionBy,
		TargetURI:       types.StringValue(e.TargetURI),
		IncludeLanes:    types.BoolValue(e.IncludeLanes),
		ScheduleKind:    types.StringValue(e.ScheduleKind),
		IntervalMinutes: int64OrNull(e.IntervalMinutes),
		Cron:            emptyAsNull(e.Cron),
		Enabled:         types.BoolValue(e.Enabled),
	}
}

func (r *exportResource) settings(ctx context.Context, plan exportModel, b body, resp *diagsHolder) {
	b.str("value_format", plan.ValueFormat)
	b["fields"] = fieldsOf(ctx, plan.Fields, resp.d)
	partitionBy := []string{}
	if known(plan.PartitionBy) {
		resp.d.Append(plan.PartitionBy.ElementsAs(ctx, &partitionBy, false)...)
	}
	b["partition_by"] = partitionBy
	b.str("target_uri", plan.TargetURI)
	b.boolean("include_lanes", plan.IncludeLanes)
	b.str("schedule_kind", plan.ScheduleKind)
	b["interval_minutes"] = nil
	b.i64("interval_minutes", plan.IntervalMinutes)
	b["cron"] = plan.Cron.ValueString()
	b.boolean("enabled", plan.Enabled)
}

func (r *exportResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan exportModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("name", plan.Name)
	b.str("topic", plan.Topic)
	r.settings(ctx, plan, b, &diagsHolder{&resp.Diagnostics})
	var created exportJSON
	if err := r.client.Post(ctx, "exports", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the export", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, exportState(created, plan.Topic))...)
}

func (r *exportResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state exportModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	var export exportJSON
	err := r.client.Get(ctx, "exports/"+escape(name), tenantQuery(tenant), &export)
	gone, err := r.client.Gone(ctx, err, tenant)
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the export", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, exportState(export, state.Topic))...)
}

// Update sends every setting: the schedule's fields depend on one another
// (interval_minutes only with an interval schedule), so they change together.
func (r *exportResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state exportModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	r.settings(ctx, plan, b, &diagsHolder{&resp.Diagnostics})
	tenant, name := splitScopedID(state.ID.ValueString())
	var export exportJSON
	if err := r.client.Patch(ctx, "exports/"+escape(name), tenantQuery(tenant), b, &export); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the export", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, exportState(export, plan.Topic))...)
}

func (r *exportResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state exportModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	_, err := r.client.Gone(ctx, r.client.Delete(ctx, "exports/"+escape(name), tenantQuery(tenant)), tenant)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the export", err, r.attrs())
	}
}

// ImportState takes `<tenant>/<name>`.
func (r *exportResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importScoped(ctx, req, resp)
}
