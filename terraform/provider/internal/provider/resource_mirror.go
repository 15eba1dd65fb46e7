package provider

import (
	"context"
	"net/url"

	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

func newMirrorResource() resource.Resource { return &mirrorResource{} }

type mirrorResource struct{ base }

type mirrorModel struct {
	ID               types.String `tfsdk:"id"`
	Tenant           types.String `tfsdk:"tenant"`
	Name             types.String `tfsdk:"name"`
	SourceRegion     types.String `tfsdk:"source_region"`
	TargetRegion     types.String `tfsdk:"target_region"`
	Direction        types.String `tfsdk:"direction"`
	Topics           types.Set    `tfsdk:"topics"`
	TopicPattern     types.String `tfsdk:"topic_pattern"`
	IncludeLanes     types.Bool   `tfsdk:"include_lanes"`
	StartPosition    types.String `tfsdk:"start_position"`
	StartTimestampMs types.Int64  `tfsdk:"start_timestamp_ms"`
	Paused           types.Bool   `tfsdk:"paused"`
	DeleteCopies     types.Bool   `tfsdk:"delete_copies_on_destroy"`
	Status           types.String `tfsdk:"status"`
	Health           types.String `tfsdk:"health"`
}

type mirrorJSON struct {
	Tenant           string   `json:"tenant"`
	Name             string   `json:"name"`
	SourceRegion     string   `json:"source_region"`
	TargetRegion     string   `json:"target_region"`
	Direction        string   `json:"direction"`
	Topics           []string `json:"topics"`
	TopicPattern     string   `json:"topic_pattern"`
	IncludeLanes     bool     `json:"include_lanes"`
	StartPosition    string   `json:"start_position"`
	StartTimestampMs *int64   `json:"start_timestamp_ms"`
	Paused           bool     `json:"paused"`
	Status           string   `json:"status"`
	StatusReason     string   `json:"status_reason"`
	Health           string   `json:"health"`
}

func (r *mirrorResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_mirror"
}

func (r *mirrorResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A mirror link: a tenant's topics copied from one region to another (or both ways), by workers " +
			"the target region's controller runs. Creating waits until the copies exist; deleting waits until the " +
			"workers stopped (the copies stay, with their records). Changing `tenant`, `name`, the regions or " +
			"`direction` replaces the link; the selection, lanes, start position and `paused` change in place.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "`<tenant>/<name>`."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "The link's name."},
			"source_region": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "Where the origin topics are."},
			"target_region": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "Where the copies go (the tenant needs a quota there: its home region or one of its `regions`)."},
			"direction": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Validators:  []validator.String{stringvalidator.OneOf("one-way", "two-way")},
				Description: "`one-way` (default) or `two-way`."},
			"topics": schema.SetAttribute{Optional: true, ElementType: types.StringType,
				Description: "Origin topics of the source region, by short name (without `<tenant>.`) or full name. Exactly one of `topics` and `topic_pattern`."},
			"topic_pattern": schema.StringAttribute{Optional: true,
				Description: "A glob (`*`, `?`, `[...]`) matched against short topic names of origin topics."},
			"include_lanes": schema.BoolAttribute{Optional: true, Computed: true, PlanModifiers: keepBool,
				Description: "Mirror the lane topics of the covered topics too."},
			"start_position": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Validators:  []validator.String{stringvalidator.OneOf("earliest", "latest", "timestamp")},
				Description: "Where a partition's copy starts when its target holds nothing copied yet."},
			"start_timestamp_ms": schema.Int64Attribute{Optional: true,
				Description: "With `start_position = \"timestamp\"`: epoch ms."},
			"paused": schema.BoolAttribute{Optional: true, Computed: true, PlanModifiers: keepBool,
				Description: "true pauses the link's workers, false resumes them."},
			"delete_copies_on_destroy": schema.BoolAttribute{Optional: true,
				Description: "Destroying the link also deletes the copies it made (and their records) once its workers " +
					"stopped. Default false: the copies stay, as topics no link keeps, and their origins cannot be " +
					"deleted while they exist (409 mirror_copies_exist)."},
			"status": schema.StringAttribute{Computed: true,
				PlanModifiers: []planmodifier.String{settling("pending", "provisioning")},
				Description: "Provisioning of the copies: `pending`, `provisioning`, `ready`, `failed`, `deleting`. A link not " +
					"ready (its create's wait ran out or was interrupted) is updated by the next apply, which waits for it."},
			"health": schema.StringAttribute{Computed: true,
				Description: "What the workers report: `starting`, `ok`, `degraded` or `paused`."},
		},
	}
}

func (r *mirrorResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(path.MatchRoot("topics"), path.MatchRoot("topic_pattern")),
	}
}

func (r *mirrorResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func mirrorState(ctx context.Context, m mirrorJSON, deleteCopies types.Bool, named types.Set) mirrorModel {
	return mirrorModel{
		DeleteCopies:     deleteCopies,
		ID:               types.StringValue(m.Tenant + "/" + m.Name),
		Tenant:           types.StringValue(m.Tenant),
		Name:             types.StringValue(m.Name),
		SourceRegion:     types.StringValue(m.SourceRegion),
		TargetRegion:     types.StringValue(m.TargetRegion),
		Direction:        types.StringValue(m.Direction),
		Topics:           topicsAsNamed(ctx, m.Tenant, m.Topics, named),
		TopicPattern:     emptyAsNull(m.TopicPattern),
		IncludeLanes:     types.BoolValue(m.IncludeLanes),
		StartPosition:    types.StringValue(m.StartPosition),
		StartTimestampMs: int64OrNull(m.StartTimestampMs),
		Paused:           types.BoolValue(m.Paused),
		Status:           types.StringValue(m.Status),
		Health:           types.StringValue(m.Health),
	}
}

func (r *mirrorResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan mirrorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("name", plan.Name)
	b.str("source_region", plan.SourceRegion)
	b.str("target_region", plan.TargetRegion)
	b.str("direction", plan.Direction)
	b.strings(ctx, "topics", plan.Topics, &resp.Diagnostics)
	b.str("topic_pattern", plan.TopicPattern)
	b.boolean("include_lanes", plan.IncludeLanes)
	b.str("start_position", plan.StartPosition)
	b.i64("start_timestamp_ms", plan.StartTimestampMs)
	b.boolean("paused", plan.Paused)
	var created mirrorJSON
	if err := r.client.Post(ctx, "mirrors", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the mirror link", err, r.attrs())
		return
	}
	link, err := r.waitReady(ctx, created.Tenant, created.Name)
	if link == nil {
		link = &created
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, mirrorState(ctx, *link, plan.DeleteCopies, plan.Topics))...)
	addCreateWait(&resp.Diagnostics, "The mirror link", err, r.attrs())
}

func (r *mirrorResource) waitReady(ctx context.Context, tenant, name string) (*mirrorJSON, error) {
	var link mirrorJSON
	err := r.client.waitFor(ctx, "waiting for mirror link "+name, func() (bool, string, error) {
		if err := r.client.Get(ctx, "mirrors/"+escape(name), tenantQuery(tenant), &link); err != nil {
			return false, "", err
		}
		if link.Status == "failed" {
			return false, link.Status, &APIError{Status: 409, Code: "failed", Message: link.StatusReason}
		}
		return link.Status == "ready", link.Status + " " + link.StatusReason, nil
	})
	if link.Name == "" {
		return nil, err
	}
	return &link, err
}

func (r *mirrorResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state mirrorModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	var link mirrorJSON
	err := r.client.Get(ctx, "mirrors/"+escape(name), tenantQuery(tenant), &link)
	gone, err := r.client.Gone(ctx, err, tenant)
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the mirror link", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, mirrorState(ctx, link, state.DeleteCopies, state.Topics))...)
}

func (r *mirrorResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state mirrorModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := changes{body{}}
	// Giving one of topics and topic_pattern clears the other.
	if !plan.Topics.Equal(state.Topics) && known(plan.Topics) {
		c.body["topics"] = stringsOf(ctx, plan.Topics, &resp.Diagnostics)
	}
	if !plan.TopicPattern.Equal(state.TopicPattern) && known(plan.TopicPattern) {
		c.body["topic_pattern"] = plan.TopicPattern.ValueString()
	}
	c.boolean("include_lanes", plan.IncludeLanes, state.IncludeLanes)
	c.str("start_position", plan.StartPosition, state.StartPosition)
	c.nullableI64("start_timestamp_ms", plan.StartTimestampMs, state.StartTimestampMs)
	c.boolean("paused", plan.Paused, state.Paused)
	tenant, name := splitScopedID(state.ID.ValueString())
	if err := r.client.Patch(ctx, "mirrors/"+escape(name), tenantQuery(tenant), c.body, nil); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the mirror link", err, r.attrs())
		return
	}
	link, err := r.waitReady(ctx, tenant, name)
	if link != nil {
		resp.Diagnostics.Append(resp.State.Set(ctx, mirrorState(ctx, *link, plan.DeleteCopies, plan.Topics))...)
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "The mirror link was changed but its copies were not made", err, r.attrs())
	}
}

func (r *mirrorResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state mirrorModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	tenant, name := splitScopedID(state.ID.ValueString())
	copies, err := r.copiesOf(ctx, state, tenant, name)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not list the mirror link's copies", err, r.attrs())
		return
	}
	path := "mirrors/" + escape(name)
	if _, err := r.client.Gone(ctx, r.client.Delete(ctx, path, tenantQuery(tenant)), tenant); err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the mirror link", err, r.attrs())
		return
	}
	if err := waitGone(ctx, r.client, path, tenantQuery(tenant)); err != nil {
		resp.Diagnostics.AddError("The mirror link was not deleted", err.Error())
		return
	}
	for _, copy := range copies {
		if err := r.deleteCopy(ctx, copy); err != nil {
			addAPIError(&resp.Diagnostics, "The mirror link was deleted but not its copy "+copy.FullName+" in "+copy.Region, err, nil)
		}
	}
}

// copyJSON is a mirror copy in a topic list.
type copyJSON struct {
	FullName   string  `json:"full_name"`
	Region     string  `json:"region"`
	MirrorLink *string `json:"mirror_link"`
}

// copiesOf lists the copies the link keeps (none unless delete_copies_on_destroy).
func (r *mirrorResource) copiesOf(ctx context.Context, state mirrorModel, tenant, name string) ([]copyJSON, error) {
	if !state.DeleteCopies.ValueBool() {
		return nil, nil
	}
	topics, err := List[copyJSON](ctx, r.client, "topics", url.Values{"tenant": {state.Tenant.ValueString()}, "mirror_copy": {"true"}})
	if err != nil {
		return nil, err
	}
	var copies []copyJSON
	for _, topic := range topics {
		if topic.MirrorLink != nil && *topic.MirrorLink == name {
			copies = append(copies, topic)
		}
	}
	return copies, nil
}

func (r *mirrorResource) deleteCopy(ctx context.Context, copy copyJSON) error {
	path := "topics/" + escape(copy.FullName)
	query := url.Values{"region": {copy.Region}}
	if _, err := r.client.Gone(ctx, r.client.Delete(ctx, path, query), topicTenant(types.StringNull(), copy.FullName)); err != nil {
		return err
	}
	return waitGone(ctx, r.client, path, query)
}

// ImportState takes `<tenant>/<name>`.
func (r *mirrorResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importScoped(ctx, req, resp)
}
